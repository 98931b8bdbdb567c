"""One segmentation run per learning rate through mmengine's Runner, and the sweep over
``cfg.lrs``: the same for mmseg's ViT (:func:`run_seg_protocol`) and for any other model wrapped
as an mmseg backbone (mmseg_adapted.py)."""
from __future__ import annotations

import logging
import uuid
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from benchmarks.segmentation import mmengine_log
from benchmarks.segmentation.mmseg_config import backbone_config, build_mmseg_config, head_config
from benchmarks.segmentation.mmseg_vit import register_mmseg_modules
from benchmarks.segmentation.pipeline_memo import register_memo_pipeline
from benchmarks.segmentation.vit_weights import save_converted
from harness.data.mmseg_layouts import ResolvedData, resolve_data
from harness.openmmlab.checkpoint_loading import mmengine_checkpoint_loading
from harness.openmmlab.metric import VALIDATION_LOG, read_validation_log, register_metric, validation_history
from harness.openmmlab.per_image_io import per_image_path
from harness.openmmlab.stack import require_mmseg

if TYPE_CHECKING:
    from benchmarks.segmentation.config import SegConfig

log = logging.getLogger(__name__)


def run_one(cfg: SegConfig, data: ResolvedData, *, backbone: dict, decode_head: dict, lr: float,
            work_dir: Path, tag: str) -> dict:
    """Train one learning rate, validating as CrIBo's schedules do.

    Returns {lr, metrics, validations, reported_iter, csv, validation_log, work_dir, iters}:
    ``metrics`` are the last validation's (at ``iters``), ``validations`` every
    (iteration, mIoU) in order.
    """
    from mmengine.dist import is_main_process

    work_dir.mkdir(parents=True, exist_ok=True)
    csv_path = work_dir / "per_class_iou.csv"
    log_path = work_dir / VALIDATION_LOG
    if cfg.resume:
        earlier = read_validation_log(log_path)
    else:
        earlier = {}
        if is_main_process():
            log_path.unlink(missing_ok=True)
            per_image_path(csv_path).unlink(missing_ok=True)  # never an earlier run's images
    # A learning rate whose last validation an interrupted run logged is done: read it back
    # (mmengine would first replay the whole data loader to find nothing left to train). A run
    # made before the per-image areas were kept resumes to validate once more and write them.
    if not (cfg.iters in earlier and csv_path.is_file() and per_image_path(csv_path).is_file()):
        experiment = f"{tag}_lr{lr:g}_{uuid.uuid4().hex[:6]}"
        mm_cfg = build_mmseg_config(cfg, data, backbone=backbone, decode_head=decode_head, lr=lr,
                                    work_dir=work_dir, csv_path=csv_path, experiment=experiment,
                                    validation_log=log_path)
        with mmengine_log.run_log() as quiet:  # mmengine's console output -> the run's log file
            runner = quiet.build_runner(mm_cfg)
            with mmengine_checkpoint_loading():
                runner.train()
                if cfg.iters not in validation_history(runner):
                    # resumed from the last checkpoint of a run whose final validation did not finish
                    runner.val()
        earlier.update(validation_history(runner))
        mmengine_log_file = quiet.log_file
    else:
        mmengine_log_file = None
    history = dict(sorted(earlier.items()))
    return {"lr": lr, "metrics": dict(history[cfg.iters]), "reported_iter": cfg.iters,
            "validations": [[it, m.get("mIoU")] for it, m in history.items()],
            "csv": str(csv_path), "validation_log": str(log_path), "work_dir": str(work_dir),
            "iters": cfg.iters, "mmengine_log": mmengine_log_file, "per_image": str(per_image_path(csv_path))}


def prepare_data(cfg: SegConfig, data_root: str | Path) -> ResolvedData:
    """Import the mmseg stack, register the harness's mmseg pieces and find the data: what every
    run needs before its backbone is configured."""
    require_mmseg()
    import mmseg.datasets  # noqa: F401  (registers datasets, transforms)
    import mmseg.evaluation  # noqa: F401
    import mmseg.models  # noqa: F401

    register_mmseg_modules()
    register_memo_pipeline()
    register_metric()
    return resolve_data(cfg.dataset, data_root)


def run_sweep(cfg: SegConfig, data: ResolvedData, work_dir: str | Path, *, backbone: dict,
              decode_head: dict, head: str) -> list[dict]:
    """Every lr of ``cfg.lrs`` with one mmseg backbone and head config, one dict per lr (the
    same sweep whichever backbone: mmseg's ViT or a feature-contract backbone)."""
    from mmengine.dist import is_main_process

    work_dir = Path(work_dir)
    out = []
    for lr in cfg.lrs:
        log.info("%s on %s: lr %g, %d iterations", head, cfg.dataset, lr, cfg.iters)
        res = run_one(cfg, data, backbone=backbone, decode_head=decode_head, lr=lr,
                      work_dir=work_dir / f"lr{lr:g}", tag=f"{head}_{data.spec.name}")
        res.update(dataset=data.spec.name, num_classes=data.num_classes, train_lists=data.train_lists,
                   synthetic=data.is_synthetic)
        if is_main_process():
            mmengine_log.run_line(head, cfg.dataset, lr, res["metrics"], cfg.iters, res["mmengine_log"])
        out.append(res)
    return out


def run_seg_protocol(backbone_state_dict: dict[str, torch.Tensor], arch_kwargs: dict, cfg: SegConfig,
                     data_root: str | Path, work_dir: str | Path, *, head: str,
                     frozen: bool) -> list[dict]:
    """The protocol on a ViT's weights, as mmseg's VisionTransformer: every lr of ``cfg.lrs``,
    one dict per lr.

    ``arch_kwargs`` needs ``num_heads`` (the rest is read off the state dict). ``head``:
    "linear" (FCNHead, num_convs=0) or "mask" (SegmenterMaskTransformerHead).
    """
    data = prepare_data(cfg, data_root)
    work_dir = Path(work_dir)
    weights = save_converted(backbone_state_dict, work_dir / "backbone_mmseg.safetensors")
    backbone = backbone_config(backbone_state_dict, arch_kwargs, cfg, frozen=frozen, weights=weights)
    decode_head = head_config(head, backbone["embed_dims"], backbone["num_heads"], data.num_classes)
    return run_sweep(cfg, data, work_dir, backbone=backbone, decode_head=decode_head, head=head)
