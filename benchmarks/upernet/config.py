"""The settings of ``upernet`` (``UperNetConfig``), each default with its source.

Defaults are iBOT's ``evaluation/semantic_segmentation/configs/upernet/vit_base_512_ade20k_160k.py``
(bytedance/ibot @ da316d8) with its ``_base_`` files (models/upernet.py, datasets/ade20k.py);
the presets add the README's command-line overrides (ViT-S: lr 3e-5, out_with_norm, 4 GPUs x 4;
ViT-B: lr 8e-5, out_with_norm, 8 GPUs x 2) or SynCLR's config (google-research/syn-rep-learn @
45f451b ``SynCLR/eval/seg/mae/mae-finetune-60k.py``). README.md lists every difference.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

ADE_DATASETS = ("ade20k", "ade", "synth_ade")
SKIP_RULES = ("mmcv", "model")


@dataclass
class UperNetConfig:
    dataset: str = "ade20k"
    crop_size: int = 512
    iters: int = 160_000                # schedule_160k.py
    batch_size: int = 16                # total: 8 GPUs x samples_per_gpu 2 (vit_base config)
    lr: float = 7e-4                    # vit_base config (the README's command sets 8e-5)
    weight_decay: float = 0.05
    betas: list[float] = field(default_factory=lambda: [0.9, 0.999])
    layer_decay: float = 0.65           # paramwise_cfg.layer_decay_rate (vit_small config: 0.9)
    layer_decay_depth: int | None = None  # paramwise_cfg.num_layers; None: the model's block count
    # mmcv: the official constructors' no-decay rule, whose bare skip list ('pos_embed',
    # 'cls_token') never matches the prefixed names, so both ARE weight decayed; model: the
    # model's own no_weight_decay() names (an opt-in fix, not the official behaviour)
    decay_skip: Literal["mmcv", "model"] = "mmcv"
    warmup_iters: int = 1500            # lr_config: linear warm-up
    warmup_ratio: float = 1e-6
    poly_power: float = 1.0
    # mmcv1: mmcv 1.x's lr_config (iBOT): the poly factor runs over all iterations and the linear
    # warm-up multiplies it; mmseg1: mmseg 1.x's configs (SynCLR): LinearLR over the warm-up, then
    # PolyLR from the end of the warm-up to the last iteration
    schedule_style: Literal["mmcv1", "mmseg1"] = "mmcv1"
    min_lr: float = 0.0
    # the multi-level backbone (harness.models.multilevel)
    out_indices: list[int] = field(default_factory=lambda: [3, 5, 7, 11])
    out_with_norm: bool = False         # register_backbone.py default; the README sets it true
    rescales: list[float] | None = None  # None: iBOT's by patch size (4, 2, 1, 0.5 at 16)
    drop_path_rate: float | None = 0.1  # the configs' backbone drop_path_rate; None: the model's own
    # resize_at_load: a harness ViT's position table is resized to the crop's grid once and trained
    # there (iBOT's mmcv_custom/checkpoint.py at load; img_size=[512]); interpolate: keep the
    # pretraining table and resample it at every forward (any other model does that)
    pos_embed: Literal["resize_at_load", "interpolate"] = "resize_at_load"
    # the heads (models/upernet.py with the vit config's overrides)
    channels: int | None = None         # UPerHead channels; None: the backbone width (384 / 768)
    aux_channels: int = 256
    pool_scales: list[int] = field(default_factory=lambda: [1, 2, 3, 6])
    dropout_ratio: float = 0.1
    aux_loss_weight: float = 0.4
    # data (datasets/ade20k.py) and test
    mean: list[float] = field(default_factory=lambda: [123.675, 116.28, 103.53])
    std: list[float] = field(default_factory=lambda: [58.395, 57.12, 57.375])
    img_scale: list[int] | None = None  # None: (2048, 512) x crop / 512
    ratio_range: list[float] = field(default_factory=lambda: [0.5, 2.0])
    cat_max_ratio: float = 0.75
    slide_stride: int | None = None     # None: 341 x crop / 512 (the configs' test_cfg)
    amp: bool = True                    # apex fp16 (IterBasedRunnerAmp, use_fp16=True)
    seed: int = 0
    # 0: validate only at the end (the reported number: run.sh tests iter_160000.pth)
    val_interval: int = 0
    # ---- execution only (not in the fingerprint)
    num_workers: int = 2
    log_interval: int = 50
    work_dir: str | None = None
    launcher: Literal["auto", "none", "pytorch", "slurm"] = "auto"

    def __post_init__(self):
        problems = []
        if self.dataset not in ADE_DATASETS:
            problems.append(f"dataset must be one of {ADE_DATASETS} (ADE20K's layout), found {self.dataset!r}")
        if min(self.iters, self.batch_size, self.crop_size) < 1 or self.lr <= 0:
            problems.append(f"iters, batch_size, crop_size and lr must be positive, found {self.iters}, "
                            f"{self.batch_size}, {self.crop_size}, {self.lr}")
        if not 0 < self.layer_decay <= 1:
            problems.append(f"layer_decay must be in (0, 1], found {self.layer_decay}")
        if self.pos_embed not in ("resize_at_load", "interpolate"):
            problems.append(f"pos_embed must be resize_at_load or interpolate, found {self.pos_embed!r}")
        if self.schedule_style not in ("mmcv1", "mmseg1"):
            problems.append(f"schedule_style must be mmcv1 or mmseg1, found {self.schedule_style!r}")
        if self.decay_skip not in SKIP_RULES:
            problems.append(f"decay_skip must be one of {SKIP_RULES}, found {self.decay_skip!r}")
        if not 0 <= self.warmup_iters < self.iters:
            problems.append(f"warmup_iters must be in [0, iters), found {self.warmup_iters}")
        if self.rescales is not None and len(self.rescales) != len(self.out_indices):
            problems.append(f"rescales needs one value per out index {self.out_indices}, found {self.rescales}")
        if self.drop_path_rate is not None and not 0 <= self.drop_path_rate < 1:
            problems.append(f"drop_path_rate must be in [0, 1) or null, found {self.drop_path_rate}")
        if len(self.mean) != 3 or len(self.std) != 3 or min(self.std) <= 0:
            problems.append(f"mean and std must be 3 numbers (std > 0), found {self.mean}, {self.std}")
        if self.val_interval < 0:
            problems.append(f"val_interval must be >= 0 (0: only at the end), found {self.val_interval}")
        if problems:
            raise ValueError("; ".join(problems))

    def scale(self) -> tuple[int, int]:
        if self.img_scale is not None:
            return int(self.img_scale[0]), int(self.img_scale[1])
        return 4 * self.crop_size, self.crop_size

    def stride(self) -> int:
        return self.slide_stride or round(self.crop_size * 341 / 512)

    def aux_index(self, rescales: list[float]) -> int:
        """The auxiliary FCN head reads the stride-1 level (in_index 2 of the official four)."""
        return rescales.index(1.0) if 1.0 in rescales else len(rescales) // 2


EXECUTION_ONLY = ("num_workers", "log_interval", "work_dir", "launcher")
