"""One ``upernet`` training through mmengine: the ADE20K data (or SynthScenes' copy of its
layout), the mmengine config of the official recipe in mmseg 1.x terms, the run, its metrics.

mmseg 0.x -> 1.x renames (README.md): Resize(img_scale, ratio_range) -> RandomResize(scale,
ratio_range, keep_ratio); Normalize + Pad(crop) -> SegDataPreProcessor(mean, std, size=crop);
lr_config poly + linear warm-up -> LinearLR(start_factor=warmup_ratio, 0..warmup) + PolyLR(eta_min,
power, warmup..iters); optimizer + constructor -> optim_wrapper(constructor, paramwise_cfg);
apex fp16 -> AmpOptimWrapper; evaluation(metric='mIoU') -> IoUMetric(iou_metrics=['mIoU']).
"""
from __future__ import annotations

import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from benchmarks.upernet import mmseg_parts as parts
from benchmarks.upernet.config import UperNetConfig
from harness.data.mmseg_layouts import resolve_data
from harness.errors import ConfigError
from harness.openmmlab.launcher import resolve_launcher, world_size
from harness.openmmlab.metric import METRIC, VALIDATION_HOOK, validation_history
from harness.openmmlab.per_image_io import PER_IMAGE_FILE



@dataclass
class AdeData:
    root: Path                         # the ADEChallengeData2016 folder (or SynthScenes' ade20k)
    classes: tuple[str, ...] | None    # SynthScenes' class names; None: mmseg's ADE20K classes
    num_classes: int


def resolve_ade(dataset: str, data_root: str | Path) -> AdeData:
    """The ADE20K layout under ``data_root`` as mmseg reads it, with SynthScenes' class names where its
    meta.json says so (harness.data.mmseg_layouts), and every image of both splits with its annotation
    (the harness's reader)."""
    from harness.data.segmentation import ADE20KSegmentation

    data = resolve_data(dataset, data_root)
    for split in ("training", "validation"):
        ADE20KSegmentation(data.root, split)
    return AdeData(data.root, data.classes, data.num_classes)


def _dataset(cfg: UperNetConfig, data: AdeData, split: str, pipeline: list[dict]) -> dict:
    d: dict[str, Any] = dict(type="BaseSegDataset" if data.classes else "ADE20KDataset", data_root=str(data.root),
                             data_prefix=dict(img_path=f"images/{split}", seg_map_path=f"annotations/{split}"),
                             img_suffix=".jpg", seg_map_suffix=".png", reduce_zero_label=True, pipeline=pipeline)
    if data.classes:  # SynthScenes' labels read as written, under its own class names
        d["metainfo"] = dict(classes=data.classes)
    return d


def pipelines(cfg: UperNetConfig) -> tuple[list[dict], list[dict]]:
    """iBOT's datasets/ade20k.py in mmseg 1.x transforms."""
    crop = (cfg.crop_size, cfg.crop_size)
    train = [dict(type="LoadImageFromFile"), dict(type="LoadAnnotations"),
             dict(type="RandomResize", scale=cfg.scale(), ratio_range=tuple(cfg.ratio_range), keep_ratio=True),
             dict(type="RandomCrop", crop_size=crop, cat_max_ratio=cfg.cat_max_ratio),
             dict(type="RandomFlip", prob=0.5), dict(type="PhotoMetricDistortion"), dict(type="PackSegInputs")]
    test = [dict(type="LoadImageFromFile"), dict(type="Resize", scale=cfg.scale(), keep_ratio=True),
            dict(type="LoadAnnotations"), dict(type="PackSegInputs")]
    return train, test


def model_config(cfg: UperNetConfig, backbone_key: str, embed_dim: int, rescales: list[float],
                 num_classes: int, norm: str) -> dict:
    """EncoderDecoder: the multi-level backbone, UPerHead and the auxiliary FCNHead (models/upernet.py
    with the vit configs' channels and in_channels), sliding-window test."""
    crop = (cfg.crop_size, cfg.crop_size)
    bn = dict(type="SyncBN", requires_grad=True)
    levels = len(rescales)
    channels = cfg.channels or embed_dim
    return dict(
        type="EncoderDecoder",
        data_preprocessor=dict(type="SegDataPreProcessor", mean=list(cfg.mean), std=list(cfg.std),
                               bgr_to_rgb=True, pad_val=0, seg_pad_val=255, size=crop),
        backbone=dict(type=parts.BACKBONE, backbone_key=backbone_key, out_indices=list(cfg.out_indices),
                      out_with_norm=cfg.out_with_norm, rescales=list(rescales), norm=norm,
                      drop_path_rate=cfg.drop_path_rate,
                      pos_embed_size=cfg.crop_size if cfg.pos_embed == "resize_at_load" else None),
        decode_head=dict(type="UPerHead", in_channels=[embed_dim] * levels, in_index=list(range(levels)),
                         pool_scales=tuple(cfg.pool_scales), channels=channels, dropout_ratio=cfg.dropout_ratio,
                         num_classes=num_classes, norm_cfg=bn, align_corners=False,
                         loss_decode=dict(type="CrossEntropyLoss", use_sigmoid=False, loss_weight=1.0)),
        auxiliary_head=dict(type="FCNHead", in_channels=embed_dim, in_index=cfg.aux_index(list(rescales)),
                            channels=cfg.aux_channels, num_convs=1, concat_input=False,
                            dropout_ratio=cfg.dropout_ratio, num_classes=num_classes, norm_cfg=bn,
                            align_corners=False,
                            loss_decode=dict(type="CrossEntropyLoss", use_sigmoid=False,
                                             loss_weight=cfg.aux_loss_weight)),
        train_cfg=dict(),
        test_cfg=dict(mode="slide", crop_size=crop, stride=(cfg.stride(), cfg.stride())))


def schedule_config(cfg: UperNetConfig) -> dict:
    """AdamW with layer decay; linear warm-up and poly decay (``schedule_style``).

    mmcv1 (iBOT): mmcv 1.x's ``lr = base x (1 - i / iters) ** power`` over every iteration, times
    ``1 - (1 - i / warmup) x (1 - warmup_ratio)`` during the warm-up. mmengine's chained schedulers
    multiply their factors; its LinearLR reaches 1 at ``end - 1`` and its PolyLR decays over
    ``end - begin - 1`` steps, hence the ``+ 1``s. mmseg1 (SynCLR): its config's schedulers as written."""
    warm = cfg.warmup_iters
    mmcv1 = cfg.schedule_style == "mmcv1"
    schedulers = ([dict(type="LinearLR", start_factor=cfg.warmup_ratio, by_epoch=False, begin=0,
                        end=warm + 1 if mmcv1 else warm)] if warm else [])
    schedulers.append(dict(type="PolyLR", eta_min=cfg.min_lr, power=cfg.poly_power, begin=0 if mmcv1 else warm,
                           end=cfg.iters + 1 if mmcv1 else cfg.iters, by_epoch=False))
    return dict(
        optim_wrapper=dict(type="AmpOptimWrapper" if cfg.amp else "OptimWrapper",
                           optimizer=dict(type="AdamW", lr=cfg.lr, betas=tuple(cfg.betas),
                                          weight_decay=cfg.weight_decay),
                           constructor=parts.CONSTRUCTOR,
                           paramwise_cfg=dict(num_layers=cfg.layer_decay_depth, layer_decay_rate=cfg.layer_decay,
                                              decay_skip=cfg.decay_skip)),
        param_scheduler=schedulers,
        train_cfg=dict(type="IterBasedTrainLoop", max_iters=cfg.iters, val_interval=cfg.val_interval or cfg.iters),
        val_cfg=dict(type="ValLoop"))


def build_config(cfg: UperNetConfig, data: AdeData, *, backbone_key: str, embed_dim: int,
                 rescales: list[float], work_dir: Path) -> Any:
    from mmengine.config import Config

    launcher = resolve_launcher(cfg.launcher)
    world = world_size(launcher)
    if cfg.batch_size % world:
        raise ConfigError(f"batch_size {cfg.batch_size} is not divisible by the {world} processes")
    train_pipe, test_pipe = pipelines(cfg)
    nw = cfg.num_workers
    cuda = torch.cuda.is_available()
    d = dict(
        default_scope="mmseg", work_dir=str(work_dir), experiment_name=f"upernet_{uuid.uuid4().hex[:8]}",
        launcher=launcher, resume=False, load_from=None, randomness=dict(seed=cfg.seed), log_level="WARNING",
        env_cfg=dict(cudnn_benchmark=cuda, mp_cfg=dict(mp_start_method="fork", opencv_num_threads=0),
                     dist_cfg=dict(backend="nccl" if cuda else "gloo")),
        log_processor=dict(by_epoch=False),
        model=model_config(cfg, backbone_key, embed_dim, rescales, data.num_classes,
                           norm="syncbn"),
        **schedule_config(cfg),
        default_hooks=dict(timer=dict(type="IterTimerHook"),
                           logger=dict(type="LoggerHook", interval=cfg.log_interval, log_metric_by_epoch=False),
                           param_scheduler=dict(type="ParamSchedulerHook"),
                           checkpoint=dict(type="CheckpointHook", by_epoch=False, interval=cfg.iters,
                                           max_keep_ckpts=1, save_last=True),
                           sampler_seed=dict(type="DistSamplerSeedHook")),
        train_dataloader=dict(batch_size=cfg.batch_size // world, num_workers=nw, persistent_workers=nw > 0,
                              sampler=dict(type="InfiniteSampler", shuffle=True),
                              dataset=_dataset(cfg, data, "training", train_pipe)),
        val_dataloader=dict(batch_size=1, num_workers=nw, persistent_workers=nw > 0,
                            sampler=dict(type="DefaultSampler", shuffle=False),
                            dataset=_dataset(cfg, data, "validation", test_pipe)),
        val_evaluator=dict(type=METRIC, iou_metrics=["mIoU"], per_image_path=str(work_dir / PER_IMAGE_FILE)),
        custom_hooks=[dict(type=VALIDATION_HOOK)],  # in memory only: upernet never resumes
        model_wrapper_cfg=dict(type="MMDistributedDataParallel", find_unused_parameters=True),
    )
    return Config(d, format_python_code=False)


def train(cfg: UperNetConfig, data: AdeData, backbone: torch.nn.Module, key: str, rescales: list[float],
          work_dir: Path) -> dict:
    """Train and validate; {metrics (the last validation's), validations, per_image, work_dir}."""
    from mmengine.runner import Runner

    work_dir.mkdir(parents=True, exist_ok=True)
    with parts.handed_over(key, backbone):
        mm_cfg = build_config(cfg, data, backbone_key=key, embed_dim=int(backbone.embed_dim),
                              rescales=rescales, work_dir=work_dir)
        runner = Runner.from_cfg(mm_cfg)
        runner.train()
    history = dict(sorted(validation_history(runner).items()))
    return {"metrics": history[max(history)], "reported_iter": max(history),
            "validations": [[it, m.get("mIoU")] for it, m in history.items()],
            "per_image": str(work_dir / PER_IMAGE_FILE), "work_dir": str(work_dir)}
