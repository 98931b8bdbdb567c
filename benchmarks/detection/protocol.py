"""Object detection and instance segmentation with Cascade Mask R-CNN (iBOT Table 6, COCO).

iBOT's recipe (bytedance/ibot @ da316d8, ``evaluation/object_detection``) run through mmdet 3.3.0:
the model's blocks 4, 6, 8, 12 through iBOT's rescales (harness.models.multilevel) into mmdet's
FPN, RPN, three cascade stages of 4conv1fc box heads with GIoU loss and an FCN mask head, AdamW
with layer-wise lr decay, the README's 1x schedule, COCO box and mask AP through pycocotools.
Settings and their sources: config.py; the mmdet config: mmdet_config.py; what is registered
into mmdet: mmdet_modules.py; every difference from the official run: README.md.

    ssl-bench eval --protocol detection --preset ibot_vit_s16 --dataset coco --data-root COCO --checkpoint CKPT
"""
from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path

import torch

from benchmarks.detection.config import EXECUTION_ONLY, DetConfig
from benchmarks.detection.mmdet_stack import MMDET_VERSION, check_ops_for_device, require_mmdet
from harness.data import coco_instances as coco_reader
from harness.errors import ConfigError, NotApplicable
from harness.models.multilevel import check_multilevel
from harness.presets import load_presets
from harness.protocol import Protocol, ProtocolResult
from harness.registry import register_protocol

# record metric -> mmdet CocoMetric key (fractions with 3 decimals; recorded in %). The evaluator
# prefixes them with the metric's "coco/".
METRIC_KEYS = {"box_AP": "bbox_mAP", "box_AP50": "bbox_mAP_50", "box_AP75": "bbox_mAP_75",
               "mask_AP": "segm_mAP", "mask_AP50": "segm_mAP_50", "mask_AP75": "segm_mAP_75"}


def to_percent(mmdet_metrics: dict) -> dict[str, float]:
    """The record's metrics (in %) from mmdet's CocoMetric output. mmdet returns no metrics at all
    when the detector kept no detection above the score threshold; COCOeval scores that 0 AP
    (every precision is 0), and so does the record."""
    if not mmdet_metrics:
        return {name: 0.0 for name in METRIC_KEYS}
    bare = {k.removeprefix("coco/"): v for k, v in mmdet_metrics.items()}
    return {name: 100.0 * float(bare.get(key, float("nan"))) for name, key in METRIC_KEYS.items()}


def _world_and_launcher(launcher: str) -> tuple[int, str]:
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if launcher == "auto":
        launcher = "pytorch" if world > 1 else "none"
    return (world if launcher != "none" else 1), launcher


def _quiet_runner(mm_cfg: dict):
    """mmengine's Runner from the config dict, its console logging at warnings only."""
    import logging

    from mmengine.config import Config
    from mmengine.runner import Runner

    runner = Runner.from_cfg(Config(mm_cfg))
    for handler in runner.logger.handlers:
        if isinstance(handler, logging.StreamHandler) and not isinstance(handler, logging.FileHandler):
            handler.setLevel(logging.WARNING)
    return runner


def train_and_evaluate(backbone: torch.nn.Module, key: str, cfg: DetConfig, data_root: Path,
                       work_dir: Path) -> dict:
    """One Cascade Mask R-CNN training of ``cfg.epochs`` and its COCO evaluation: mmdet's metrics."""
    import mmdet.datasets  # noqa: F401  (registers datasets, transforms, metrics)
    import mmdet.evaluation  # noqa: F401
    from mmdet.utils import register_all_modules

    from benchmarks.detection.mmdet_config import run_config
    from benchmarks.detection.mmdet_modules import KEEP_METRICS, handed_over, register_modules

    register_all_modules(init_default_scope=False)
    register_modules()
    train, val = coco_reader.check_pair(data_root, cfg.train_split, cfg.val_split)
    world, launcher = _world_and_launcher(cfg.launcher)
    with handed_over(key, backbone):
        in_channels = [int(backbone.embed_dim)] * len(cfg.out_indices)
        mm_cfg = run_config(cfg, model_key=key, in_channels=in_channels, train=train, val=val,
                            work_dir=work_dir, world=world, launcher=launcher)
        runner = _quiet_runner(mm_cfg)
        t0 = time.time()
        # pycocotools prints its summaries: into the run's log folder, not the console
        with open(Path(runner.log_dir) / "stdout.log", "a") as sink, contextlib.redirect_stdout(sink):
            runner.train()
    keep = next(h for h in runner.hooks if type(h).__name__ == KEEP_METRICS)
    if not keep.history:
        raise RuntimeError(f"mmengine's training of {cfg.epochs} epochs ended without a validation")
    return {"metrics": keep.history[-1], "seconds": time.time() - t0, "iters": runner.iter,
            "train": train, "val": val, "log_dir": str(runner.log_dir)}


@register_protocol("detection")
class DetectionProtocol(Protocol):
    Config = DetConfig
    NOT_IN_FINGERPRINT = EXECUTION_ONLY
    PRESETS = load_presets("detection", Path(__file__).parent / "presets")
    DEFAULT_PRESET = "ibot_vit_s16"
    RUNS_ON_EVERY_RANK = True  # mmengine's launcher 'pytorch' trains on every torchrun process

    def fingerprint(self, extra: dict | None = None) -> str:
        return super().fingerprint({"mmdet": MMDET_VERSION, **(extra or {})})

    def precision(self) -> str:
        return "fp16" if self.cfg.amp else "fp32"

    def default_work_dir(self, model, data_root: Path) -> Path:
        from harness.data.io import data_stamp
        from harness.paths import home

        fingerprint = self.identity(data_root, model).fingerprint
        return home() / "mmdet" / model.cache_key[:16] / f"detection-{fingerprint}-{data_stamp(data_root)[:8]}"

    def check_runnable(self, model) -> None:
        """Everything refused before any work, each in one line."""
        if model.context == "pixels":
            raise NotApplicable("detection trains a detector on a network's feature levels; the raw-pixel "
                                "baseline has no network")
        check_multilevel(model.backbone, self.cfg.out_indices)
        require_mmdet()
        device = model.device.type
        if device == "cpu" and torch.cuda.is_available():
            raise ConfigError("detection runs through mmengine, which trains on the GPU when torch sees one: run it "
                              "with --device cuda, or hide the GPUs (CUDA_VISIBLE_DEVICES='') to run on the CPU")
        check_ops_for_device("cuda" if torch.cuda.is_available() else device)
        if self.cfg.amp and device != "cuda":
            raise ConfigError("detection: amp (fp16, the official run) needs a GPU; set amp=false to train in fp32 "
                              "on the CPU")

    def run(self, model, data_root: Path) -> list[ProtocolResult]:
        self.check_runnable(model)
        work_dir = Path(self.cfg.work_dir) if self.cfg.work_dir else self.default_work_dir(model, data_root)
        out = train_and_evaluate(model.backbone, model.cache_key, self.cfg, Path(data_root), work_dir)
        if int(os.environ.get("RANK", "0")) != 0:
            return []  # one set of records per run, written by rank 0
        train, val = out["train"], out["val"]
        return [ProtocolResult(
            metrics=to_percent(out["metrics"]), dataset=self.cfg.dataset, split=self.cfg.val_split,
            seed=self.cfg.seed,
            params={"num_classes": len(train.classes), "train_images": train.num_images,
                    "val_images": val.num_images, "iters": out["iters"], "mmdet": MMDET_VERSION,
                    "mmdet_metrics": out["metrics"], "no_detections": not out["metrics"]},
            artifacts={"work_dir": str(work_dir), "mmengine_log_dir": out["log_dir"]},
            cost={"train_and_eval_s": out["seconds"]})]
