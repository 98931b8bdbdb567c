"""The whole mmengine config of one segmentation run (one learning rate), from the protocols'
dataclass settings (config.py) instead of Python config files: the pipelines, datasets and
loaders, the EncoderDecoder with its backbone and head, the schedule and the hooks. Sources of
every default: config.py and README.md."""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from benchmarks.segmentation.layouts import seg_sizes
from benchmarks.segmentation.pipeline_memo import memo_pipeline
from benchmarks.segmentation.vit_weights import backbone_kwargs
from harness.data.mmseg_layouts import ResolvedData
from harness.errors import ConfigError
from harness.openmmlab.launcher import resolve_launcher, world_size
from harness.openmmlab.metric import METRIC, VALIDATION_HOOK, VALIDATION_LOG
from harness.openmmlab.per_image_io import per_image_path

if TYPE_CHECKING:
    from benchmarks.segmentation.config import SegConfig


def pipelines(cfg: SegConfig, data: ResolvedData) -> tuple[list[dict], list[dict]]:
    """mmseg's train / test pipelines for the dataset, at the configured crop."""
    scale = cfg.scale()
    crop = cfg.train_crop()
    train = [
        dict(type="LoadImageFromFile"),
        # reduce_zero_label comes from the dataset (mmseg's configs also repeat it here,
        # which mmseg 1.2.2 deprecates with a warning; the effect is the same)
        dict(type="LoadAnnotations"),
        dict(type="RandomResize", scale=scale, ratio_range=(0.5, 2.0), keep_ratio=True),
        dict(type="RandomCrop", crop_size=(crop, crop), cat_max_ratio=0.75),
        dict(type="RandomFlip", prob=0.5),
        dict(type="PhotoMetricDistortion"),
    ]
    if seg_sizes(data.spec.name).pad_train:
        train.append(dict(type="Pad", size=(cfg.crop_size, cfg.crop_size)))
    train.append(dict(type="PackSegInputs"))
    test = [
        dict(type="LoadImageFromFile"),
        dict(type="Resize", scale=scale, keep_ratio=True),
        # annotations after Resize: the metric compares at the original size
        dict(type="LoadAnnotations"),
        dict(type="PackSegInputs"),
    ]
    return train, test


def build_mmseg_config(cfg: SegConfig, data: ResolvedData, *, backbone: dict, decode_head: dict,
                       lr: float, work_dir: Path, csv_path: Path, experiment: str,
                       validation_log: Path | None = None) -> "Any":
    """The whole mmengine config of one run (one learning rate).

    Validation runs every ``cfg.validation_interval()`` iterations and at the last one, as
    CrIBo's schedule configs (its train.py only calls ``runner.train()``; the last validation
    is its final number). Each validation is appended to ``validation_log`` (JSON lines).
    """
    from mmengine.config import Config

    launcher = resolve_launcher(cfg.launcher)
    world = world_size(launcher)
    if cfg.batch_size % world:
        raise ConfigError(f"batch_size {cfg.batch_size} is not divisible by the {world} processes")
    train_set, val_set = _datasets(cfg, data)
    cuda = torch.cuda.is_available()

    d: dict[str, Any] = dict(
        default_scope="mmseg",
        work_dir=str(work_dir),
        experiment_name=experiment,
        launcher=launcher,
        resume=cfg.resume,
        load_from=None,
        randomness=dict(seed=cfg.seed),
        env_cfg=dict(cudnn_benchmark=cuda, mp_cfg=dict(mp_start_method="fork", opencv_num_threads=0),
                     dist_cfg=dict(backend="nccl" if cuda else "gloo")),
        log_level="INFO",
        log_processor=dict(by_epoch=False),
        vis_backends=[dict(type="LocalVisBackend")],
        visualizer=dict(type="SegLocalVisualizer", vis_backends=[dict(type="LocalVisBackend")],
                        name=f"vis_{experiment}"),
        model=_model(cfg, backbone, decode_head),
        **_schedule(cfg, lr),
        default_hooks=_default_hooks(cfg),
        **_dataloaders(cfg, world, train_set, val_set),
        # every validation rewrites the per-class table: the file left is the last one's
        val_evaluator=dict(type=METRIC, iou_metrics=["mIoU"], csv_path=str(csv_path),
                           per_image_path=str(per_image_path(csv_path))),
        custom_hooks=[dict(type=VALIDATION_HOOK,
                           path=str(validation_log or Path(work_dir) / VALIDATION_LOG))],
    )
    if backbone.get("type") == "SslBenchFeatureBackbone" and not backbone.get("frozen"):
        # a foreign model trained end to end may hold weights its features never reach (a
        # transformers pooler, a classifier left in place): DDP must not wait for their gradients
        d["model_wrapper_cfg"] = dict(type="MMDistributedDataParallel", find_unused_parameters=True)
    # yapf formatting of the dumped config costs seconds per checkpoint (mmengine stores the
    # config text in every checkpoint); the unformatted text is the same config.
    return Config(d, format_python_code=False)


def _datasets(cfg: SegConfig, data: ResolvedData) -> tuple[dict, dict]:
    """The train dataset (one, or a concatenation) and the val dataset, with their pipelines."""
    train_pipe, test_pipe = pipelines(cfg, data)
    dataset_type = "BaseSegDataset" if data.is_synthetic else data.spec.mmseg_type
    # mmengine pickles the file list so that loader workers share it, and runs a full
    # gc.collect() each time (about a second in a process that has run other protocols); without
    # workers the list is read as it is, the same items
    kept = dict(serialize_data=cfg.num_workers > 0)
    if not cfg.num_workers:  # the samples of this process's earlier models (pipeline_memo.py)
        train_pipe, test_pipe = memo_pipeline(train_pipe), memo_pipeline(test_pipe)
    train_sets = [dict(type=dataset_type, pipeline=train_pipe, **kept, **d) for d in data.train]
    train_set = train_sets[0] if len(train_sets) == 1 else dict(type="ConcatDataset", datasets=train_sets)
    val_set = dict(type=dataset_type, pipeline=test_pipe, **kept, **data.val)
    return train_set, val_set


def _model(cfg: SegConfig, backbone: dict, decode_head: dict) -> dict:
    crop = (cfg.crop_size, cfg.crop_size)
    return dict(
        type="EncoderDecoder",
        data_preprocessor=dict(type="SegDataPreProcessor", mean=list(cfg.mean), std=list(cfg.std),
                               bgr_to_rgb=True, pad_val=0, seg_pad_val=255, size=crop),
        backbone=backbone,
        decode_head=decode_head,
        test_cfg=dict(mode="slide", crop_size=crop, stride=(cfg.stride(), cfg.stride())),
    )


def _schedule(cfg: SegConfig, lr: float) -> dict:
    """optim_wrapper, param_scheduler, train_cfg and val_cfg: Adam, poly decay, iteration-based."""
    return dict(
        optim_wrapper=dict(type="AmpOptimWrapper" if cfg.amp else "OptimWrapper",
                           optimizer=dict(type="Adam", lr=lr, weight_decay=cfg.weight_decay),
                           clip_grad=None),
        param_scheduler=[dict(type="PolyLR", eta_min=lr * cfg.eta_min_ratio, power=cfg.poly_power,
                              begin=0, end=cfg.iters, by_epoch=False)],
        train_cfg=dict(type="IterBasedTrainLoop", max_iters=cfg.iters,
                       val_interval=cfg.validation_interval()),
        val_cfg=dict(type="ValLoop"),
    )


def _default_hooks(cfg: SegConfig) -> dict:
    ckpt_every = cfg.checkpoint_interval or max(1, cfg.iters // 10)
    return dict(
        timer=dict(type="IterTimerHook"),
        logger=dict(type="LoggerHook", interval=cfg.log_interval, log_metric_by_epoch=False),
        param_scheduler=dict(type="ParamSchedulerHook"),
        checkpoint=dict(type="CheckpointHook", by_epoch=False, interval=ckpt_every,
                        max_keep_ckpts=1, save_last=True),
        sampler_seed=dict(type="DistSamplerSeedHook"),
    )


def _dataloaders(cfg: SegConfig, world: int, train_set: dict, val_set: dict) -> dict:
    """train_dataloader (the global batch split over ``world`` processes) and val_dataloader."""
    nw = cfg.num_workers
    return dict(
        train_dataloader=dict(batch_size=cfg.batch_size // world, num_workers=nw,
                              persistent_workers=nw > 0,
                              sampler=dict(type="InfiniteSampler", shuffle=True), dataset=train_set),
        val_dataloader=dict(batch_size=1, num_workers=nw, persistent_workers=nw > 0,
                            sampler=dict(type="DefaultSampler", shuffle=False), dataset=val_set),
    )


def backbone_config(backbone_state_dict: dict[str, torch.Tensor], arch_kwargs: dict, cfg: SegConfig, *,
                    frozen: bool, weights: str | Path | None = None) -> dict:
    """The mmseg backbone (``SslBenchViT``) of a run.

    A frozen backbone's mode while the head trains is ``cfg.frozen_backbone_mode`` (seg_linear's
    setting; "eval" where a config has none): "train" as CrIBo (DropPath at ``drop_path_rate``
    on the frozen features), "eval" deterministic (built with drop path 0).
    """
    if "num_heads" not in arch_kwargs:
        raise ConfigError(f"arch_kwargs must give num_heads, found {sorted(arch_kwargs)}")
    mode = getattr(cfg, "frozen_backbone_mode", "eval") if frozen else "eval"
    drop_path = cfg.drop_path_rate if (not frozen or mode == "train") else 0.0
    bk = backbone_kwargs(backbone_state_dict, int(arch_kwargs["num_heads"]), cfg.crop_size,
                                      drop_path)
    return dict(type="SslBenchViT", weights=None if weights is None else str(weights), frozen=frozen,
                frozen_mode=mode, **bk)


# Segmenter's mask transformer: mmseg's configs (2 layers) and the head's default drop path.
MASK_LAYERS = 2
MASK_DROP_PATH = 0.1


def head_config(head: str, embed_dims: int, num_heads: int, num_classes: int) -> dict:
    loss = dict(type="CrossEntropyLoss", use_sigmoid=False, loss_weight=1.0)
    if head == "linear":
        # mmseg's segmenter_vit-s_fcn config (CrIBo's linear head): a 1x1 conv on the tokens.
        return dict(type="FCNHead", in_channels=embed_dims, channels=embed_dims, num_convs=0,
                    concat_input=False, dropout_ratio=0.0, num_classes=num_classes,
                    align_corners=False, loss_decode=loss)
    if head == "mask":
        return dict(type="SegmenterMaskTransformerHead", in_channels=embed_dims, channels=embed_dims,
                    num_classes=num_classes, num_layers=MASK_LAYERS, num_heads=num_heads,
                    embed_dims=embed_dims, mlp_ratio=4, drop_path_rate=MASK_DROP_PATH,
                    dropout_ratio=0.0, loss_decode=loss)
    raise ConfigError(f"unknown segmentation head {head!r}; choose linear or mask")
