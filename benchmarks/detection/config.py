"""The detection protocol's settings (``DetConfig``), each default with its source.

Sources (bytedance/ibot @ da316d8, ``evaluation/object_detection``; "README" is
``evaluation/README.md``'s "Object Detection and Instance Segmentation on COCO"):
- backbone: ``configs/cascade_rcnn/vit_{small,base}_giou_4conv1f_coco_3x.py`` -- blocks 4, 6, 8,
  12 (``out_indices (3, 5, 7, 11)``), drop path 0.1 (ViT-S) / 0.2 (ViT-B), no norm on the kept
  blocks (``out_with_norm`` False, the backbone's default), SyncBN in the x4 rescale;
- optimiser: AdamW lr 1e-4, betas (0.9, 0.999), weight decay 0.05, layer decay through
  ``LayerDecayOptimizerConstructor`` (``num_layers`` 12); the rate and schedule are the
  README's command-line overrides: 0.8 (ViT-S) / 0.75 (ViT-B), 12 epochs, steps at 8 and 11;
- schedule: ``_base_/schedules/schedule_1x.py`` -- step policy x0.1, linear warmup 500
  iterations from 0.001;
- batch: the README's ``data.samples_per_gpu`` x 8 GPUs: 32 (ViT-S) / 16 (ViT-B);
- data: the config's DETR-style train pipeline (flip 0.5, then one of two policies: resize the
  short side to 480..800 step 32 with the long side <= 1333; or resize to 400/500/600, crop
  384..600, resize as the first), test at (1333, 800), ImageNet mean / std in 0..255, pad to 32;
- fp16: the config's ``use_fp16=True`` (apex-style loss scaling in its optimizer hook).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

# (short side, long side max) of the config's multi-scale training: 480..800 step 32 x 1333
OFFICIAL_TRAIN_SCALES = [[s, 1333] for s in range(480, 801, 32)]
OFFICIAL_TEST_SCALE = [800, 1333]
IMAGENET_MEAN_255 = [123.675, 116.28, 103.53]
IMAGENET_STD_255 = [58.395, 57.12, 57.375]


@dataclass
class DetConfig:
    """Settings of one Cascade Mask R-CNN training and its COCO evaluation."""

    dataset: str = "coco"
    train_split: str = "train2017"
    val_split: str = "val2017"
    # ---- backbone (harness.models.multilevel)
    out_indices: list[int] = field(default_factory=lambda: [3, 5, 7, 11])
    rescales: list[float] | None = None   # None: iBOT's for the patch size
    out_with_norm: bool = False
    adapter_norm: Literal["bn", "syncbn"] = "syncbn"
    drop_path_rate: float = 0.1
    # ---- heads (the official config's; the widths and sample counts are scaled down only by the
    # CPU SynthScenes preset)
    bbox_head_norm: Literal["SyncBN", "BN"] = "SyncBN"
    fpn_channels: int = 256
    head_channels: int = 256            # the box heads' 4 convs and the mask head's convs
    fc_channels: int = 1024
    roi_samples: int = 512              # RoIs sampled per image and stage (RandomSampler num)
    rpn_train_proposals: int = 2000     # rpn_proposal nms_pre / max_per_img
    rpn_test_proposals: int = 1000
    # ---- optimiser and schedule
    lr: float = 1e-4
    weight_decay: float = 0.05
    betas: list[float] = field(default_factory=lambda: [0.9, 0.999])
    layer_decay: float = 0.8
    layer_decay_depth: int | None = None  # paramwise_cfg.num_layers; None: the model's block count
    epochs: int = 12
    lr_steps: list[int] = field(default_factory=lambda: [8, 11])
    warmup_iters: int = 500
    warmup_ratio: float = 0.001
    batch_size: int = 32                   # total over all processes
    amp: bool = True
    # ---- data
    augment: Literal["detr", "resize"] = "detr"  # detr: the config's AutoAugment; resize: multi-scale only
    train_scales: list[list[int]] = field(default_factory=lambda: [list(s) for s in OFFICIAL_TRAIN_SCALES])
    test_scale: list[int] = field(default_factory=lambda: list(OFFICIAL_TEST_SCALE))
    mean: list[float] = field(default_factory=lambda: list(IMAGENET_MEAN_255))
    std: list[float] = field(default_factory=lambda: list(IMAGENET_STD_255))
    seed: int = 0
    # ---- execution only (not in the fingerprint)
    num_workers: int = 2
    log_interval: int = 50
    work_dir: str | None = None           # None: $SSL_BENCH_HOME/mmdet/<model>/<fingerprint>
    launcher: Literal["auto", "none", "pytorch", "slurm"] = "auto"

    def __post_init__(self):
        problems = []
        if self.epochs < 1 or self.batch_size < 1 or self.warmup_iters < 0:
            problems.append(f"epochs and batch_size must be >= 1 and warmup_iters >= 0, found "
                            f"{self.epochs}, {self.batch_size}, {self.warmup_iters}")
        if self.lr <= 0 or self.weight_decay < 0 or not 0 < self.layer_decay <= 1:
            problems.append(f"need lr > 0, weight_decay >= 0 and 0 < layer_decay <= 1, found {self.lr}, "
                            f"{self.weight_decay}, {self.layer_decay}")
        if any(not 0 < s <= self.epochs for s in self.lr_steps) or self.lr_steps != sorted(self.lr_steps):
            problems.append(f"lr_steps must be increasing epochs in 1..{self.epochs}, found {self.lr_steps}")
        if not self.train_scales or any(len(s) != 2 or min(s) < 1 for s in self.train_scales):
            problems.append(f"train_scales must be [short, long] pairs, found {self.train_scales}")
        if len(self.test_scale) != 2 or min(self.test_scale) < 1:
            problems.append(f"test_scale must be [short, long], found {self.test_scale}")
        if len(self.mean) != 3 or len(self.std) != 3 or min(self.std) <= 0:
            problems.append(f"mean and std must be 3 numbers (std > 0), found {self.mean}, {self.std}")
        if min(self.fpn_channels, self.head_channels, self.fc_channels, self.roi_samples,
               self.rpn_train_proposals, self.rpn_test_proposals) < 1:
            problems.append("head widths, roi_samples and proposal counts must be >= 1")
        if self.augment not in ("detr", "resize"):
            problems.append(f"augment must be detr or resize, found {self.augment!r}")
        if problems:
            raise ValueError("; ".join(problems))


EXECUTION_ONLY = ("num_workers", "log_interval", "work_dir", "launcher")
