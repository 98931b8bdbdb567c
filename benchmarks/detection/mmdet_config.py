"""The mmengine config of one detection run: iBOT's Cascade Mask R-CNN
(``configs/_base_/models/cascade_mask_rcnn_vit_fpn.py`` with the 4conv1fc GIoU box heads of
``configs/cascade_rcnn/vit_{small,base}_giou_4conv1f_coco_3x.py``, bytedance/ibot @ da316d8)
written in mmdet 3.3's names, built from ``DetConfig``. benchmarks/detection/README.md lists
every mmdet 2 -> 3 rename and every difference.
"""
from __future__ import annotations

from pathlib import Path

from harness.data.coco_instances import CocoSplit
from benchmarks.detection.config import DetConfig
from benchmarks.detection.mmdet_modules import BACKBONE, CONSTRUCTOR, KEEP_METRICS

# The cascade's stages: (box-coder target stds, assigner IoU threshold), stage loss weights.
STAGES = (((0.1, 0.1, 0.2, 0.2), 0.5), ((0.05, 0.05, 0.1, 0.1), 0.6), ((0.033, 0.033, 0.067, 0.067), 0.7))
STAGE_LOSS_WEIGHTS = (1, 0.5, 0.25)
ROI_STRIDES = [4, 8, 16, 32]


def backbone_config(cfg: DetConfig, model_key: str) -> dict:
    return dict(type=BACKBONE, model_key=model_key, out_indices=list(cfg.out_indices),
                out_with_norm=cfg.out_with_norm, rescales=cfg.rescales, norm=cfg.adapter_norm,
                drop_path_rate=cfg.drop_path_rate)


def bbox_head(cfg: DetConfig, stds, num_classes: int) -> dict:
    """One stage's 4conv1fc head: 4 shared 3x3 convs (BN) + 1 shared fc, class-specific GIoU regression."""
    return dict(type="ConvFCBBoxHead", num_shared_convs=4, num_shared_fcs=1, in_channels=cfg.fpn_channels,
                conv_out_channels=cfg.head_channels, fc_out_channels=cfg.fc_channels, roi_feat_size=7,
                num_classes=num_classes,
                bbox_coder=dict(type="DeltaXYWHBBoxCoder", target_means=[0.0] * 4, target_stds=list(stds)),
                reg_class_agnostic=False, reg_decoded_bbox=True,
                norm_cfg=dict(type=cfg.bbox_head_norm, requires_grad=True),
                loss_cls=dict(type="CrossEntropyLoss", use_sigmoid=False, loss_weight=1.0),
                loss_bbox=dict(type="GIoULoss", loss_weight=10.0))


def _rcnn_train(iou: float, samples: int) -> dict:
    return dict(assigner=dict(type="MaxIoUAssigner", pos_iou_thr=iou, neg_iou_thr=iou, min_pos_iou=iou,
                              match_low_quality=False, ignore_iof_thr=-1),
                sampler=dict(type="RandomSampler", num=samples, pos_fraction=0.25, neg_pos_ub=-1,
                             add_gt_as_proposals=True),
                mask_size=28, pos_weight=-1, debug=False)


def roi_extractor(cfg: DetConfig, size: int) -> dict:
    return dict(type="SingleRoIExtractor", out_channels=cfg.fpn_channels, featmap_strides=ROI_STRIDES,
                roi_layer=dict(type="RoIAlign", output_size=size, sampling_ratio=0))


def roi_head(cfg: DetConfig, num_classes: int) -> dict:
    """The cascade: three box stages (RoIAlign 7) and the FCN mask head (RoIAlign 14, 4 convs)."""
    return dict(type="CascadeRoIHead", num_stages=3, stage_loss_weights=list(STAGE_LOSS_WEIGHTS),
                bbox_roi_extractor=roi_extractor(cfg, 7),
                bbox_head=[bbox_head(cfg, stds, num_classes) for stds, _ in STAGES],
                mask_roi_extractor=roi_extractor(cfg, 14),
                mask_head=dict(type="FCNMaskHead", num_convs=4, in_channels=cfg.fpn_channels,
                               conv_out_channels=cfg.head_channels, num_classes=num_classes,
                               loss_mask=dict(type="CrossEntropyLoss", use_mask=True, loss_weight=1.0)))


def model_config(cfg: DetConfig, model_key: str, in_channels: list[int], num_classes: int) -> dict:
    """CascadeRCNN: the multi-level backbone, mmdet's FPN, RPN, three cascade stages, FCN mask head."""
    rpn_nms = dict(type="nms", iou_threshold=0.7)
    return dict(
        type="CascadeRCNN",
        data_preprocessor=dict(type="DetDataPreprocessor", mean=list(cfg.mean), std=list(cfg.std),
                               bgr_to_rgb=True, pad_size_divisor=32, pad_mask=True),
        backbone=backbone_config(cfg, model_key),
        neck=dict(type="FPN", in_channels=in_channels, out_channels=cfg.fpn_channels, num_outs=5),
        rpn_head=dict(
            type="RPNHead", in_channels=cfg.fpn_channels, feat_channels=cfg.fpn_channels,
            anchor_generator=dict(type="AnchorGenerator", scales=[8], ratios=[0.5, 1.0, 2.0],
                                  strides=[4, 8, 16, 32, 64]),
            bbox_coder=dict(type="DeltaXYWHBBoxCoder", target_means=[0.0] * 4, target_stds=[1.0] * 4),
            loss_cls=dict(type="CrossEntropyLoss", use_sigmoid=True, loss_weight=1.0),
            loss_bbox=dict(type="SmoothL1Loss", beta=1.0 / 9.0, loss_weight=1.0)),
        roi_head=roi_head(cfg, num_classes),
        train_cfg=dict(
            rpn=dict(assigner=dict(type="MaxIoUAssigner", pos_iou_thr=0.7, neg_iou_thr=0.3, min_pos_iou=0.3,
                                   match_low_quality=True, ignore_iof_thr=-1),
                     sampler=dict(type="RandomSampler", num=256, pos_fraction=0.5, neg_pos_ub=-1,
                                  add_gt_as_proposals=False),
                     allowed_border=0, pos_weight=-1, debug=False),
            rpn_proposal=dict(nms_pre=cfg.rpn_train_proposals, max_per_img=cfg.rpn_train_proposals, nms=rpn_nms,
                              min_bbox_size=0),
            rcnn=[_rcnn_train(iou, cfg.roi_samples) for _, iou in STAGES]),
        test_cfg=dict(
            rpn=dict(nms_pre=cfg.rpn_test_proposals, max_per_img=cfg.rpn_test_proposals, nms=rpn_nms, min_bbox_size=0),
            rcnn=dict(score_thr=0.05, nms=dict(type="nms", iou_threshold=0.5), max_per_img=100,
                      mask_thr_binary=0.5)))


def _scales(pairs) -> list[tuple[int, int]]:
    """mmdet 3's (long, short) scale tuples of [short, long] pairs (keep_ratio: order-free)."""
    return [(int(long), int(short)) for short, long in pairs]


def train_pipeline(cfg: DetConfig) -> list[dict]:
    """The config's DETR-style augmentation (``augment: detr``), or the multi-scale resize alone."""
    multiscale = dict(type="RandomChoiceResize", scales=_scales(cfg.train_scales), keep_ratio=True)
    if cfg.augment == "detr":
        short_max = max(s for s, _ in cfg.train_scales)
        # the second policy's pre-crop sizes and crop range, in proportion to the scales (official at 800)
        k = short_max / 800
        pre = [[round(s * k), round(1333 * k)] for s in (400, 500, 600)]
        crop = (round(384 * k), round(600 * k))
        resize = dict(type="RandomChoice", transforms=[
            [multiscale],
            [dict(type="RandomChoiceResize", scales=_scales(pre), keep_ratio=True),
             dict(type="RandomCrop", crop_type="absolute_range", crop_size=crop, allow_negative_crop=True),
             multiscale]])
    else:
        resize = multiscale
    return [dict(type="LoadImageFromFile"), dict(type="LoadAnnotations", with_bbox=True, with_mask=True),
            dict(type="RandomFlip", prob=0.5), resize, dict(type="PackDetInputs")]


def test_pipeline(cfg: DetConfig) -> list[dict]:
    short, long = cfg.test_scale
    return [dict(type="LoadImageFromFile"), dict(type="Resize", scale=(long, short), keep_ratio=True),
            dict(type="LoadAnnotations", with_bbox=True, with_mask=True),
            dict(type="PackDetInputs", meta_keys=("img_id", "img_path", "ori_shape", "img_shape", "scale_factor"))]


def dataset(split: CocoSplit, pipeline: list[dict], test_mode: bool) -> dict:
    return dict(type="CocoDataset", data_root=str(split.root), ann_file=str(split.ann_file),
                data_prefix=dict(img=str(split.image_dir) + "/"), metainfo=dict(classes=split.classes),
                filter_cfg=None if test_mode else dict(filter_empty_gt=True, min_size=32),
                pipeline=pipeline, test_mode=test_mode)


def schedule(cfg: DetConfig) -> list[dict]:
    """schedule_1x's step policy with linear warmup, the README's steps."""
    return [dict(type="LinearLR", start_factor=cfg.warmup_ratio, by_epoch=False, begin=0,
                 end=max(1, cfg.warmup_iters)),
            dict(type="MultiStepLR", by_epoch=True, begin=0, end=cfg.epochs, milestones=list(cfg.lr_steps),
                 gamma=0.1)]


def optim_wrapper(cfg: DetConfig) -> dict:
    return dict(type="AmpOptimWrapper" if cfg.amp else "OptimWrapper",
                optimizer=dict(type="AdamW", lr=cfg.lr, betas=tuple(cfg.betas), weight_decay=cfg.weight_decay),
                constructor=CONSTRUCTOR,
                paramwise_cfg=dict(layer_decay_rate=cfg.layer_decay, num_layers=cfg.layer_decay_depth))


def run_config(cfg: DetConfig, *, model_key: str, in_channels: list[int], train: CocoSplit, val: CocoSplit,
               work_dir: Path, world: int, launcher: str) -> dict:
    """The whole mmengine config: model, data, optimiser, schedule, evaluation, hooks."""
    per_process = max(1, cfg.batch_size // world)
    loader = dict(num_workers=cfg.num_workers, persistent_workers=cfg.num_workers > 0)
    return dict(
        default_scope="mmdet", work_dir=str(work_dir), launcher=launcher, log_level="WARNING",
        randomness=dict(seed=cfg.seed, deterministic=False),
        model=model_config(cfg, model_key, in_channels, len(train.classes)),
        train_dataloader=dict(batch_size=per_process, **loader, sampler=dict(type="DefaultSampler", shuffle=True),
                              batch_sampler=dict(type="AspectRatioBatchSampler"),
                              dataset=dataset(train, train_pipeline(cfg), False)),
        val_dataloader=dict(batch_size=1, **loader, drop_last=False,
                            sampler=dict(type="DefaultSampler", shuffle=False),
                            dataset=dataset(val, test_pipeline(cfg), True)),
        val_evaluator=dict(type="CocoMetric", ann_file=str(val.ann_file), metric=["bbox", "segm"], format_only=False),
        # validated once, after the last epoch (the reported number is the last epoch's)
        train_cfg=dict(type="EpochBasedTrainLoop", max_epochs=cfg.epochs, val_interval=cfg.epochs),
        custom_hooks=[dict(type=KEEP_METRICS)],
        val_cfg=dict(type="ValLoop"),
        optim_wrapper=optim_wrapper(cfg),
        param_scheduler=schedule(cfg),
        default_hooks=dict(timer=dict(type="IterTimerHook"),
                           logger=dict(type="LoggerHook", interval=cfg.log_interval),
                           param_scheduler=dict(type="ParamSchedulerHook"),
                           checkpoint=dict(type="CheckpointHook", interval=-1, save_last=False),
                           sampler_seed=dict(type="DistSamplerSeedHook")),
        env_cfg=dict(cudnn_benchmark=False, dist_cfg=dict(backend="nccl")),
        resume=False)
