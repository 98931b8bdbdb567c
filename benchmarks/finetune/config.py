"""The settings of the ``finetune`` protocol: every flag of iBOT's (BEiT's)
``evaluation/classification_layer_decay/run_class_finetuning.py`` that changes the result, under
its official name, with the official argparse default (a preset states the README's or the
paper's values; bytedance/ibot at da316d8).

Batch: ``batch_size`` is the effective batch of one optimisation step (the official
``batch_size x update_freq x world_size``, 1024 in every ImageNet recipe): it is what the
fingerprint keeps. ``update_freq`` (gradient accumulation) and the number of processes only say how
it is reached, so they are left out of the fingerprint and written in the record.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from harness.errors import ConfigError


@dataclass
class FinetuneConfig:
    # ---- data
    dataset: str = "imagenet"
    train_split: str = "train"
    # a named training subset (harness.data.subsets: imagenet_1pct / imagenet_10pct, SimCLRv2's lists,
    # or a list file): its content hash joins the fingerprint; empty: the whole training split
    train_subset: str = ""
    val_split: str = "val"
    input_size: int = 224
    # --imagenet_default_mean_and_std: False (the argparse default) normalises with Inception's
    # 0.5 / 0.5; run.sh's imagenet_cls passes the flag (ImageNet mean and std)
    imagenet_default_mean_and_std: bool = False
    # mean / std by name: None follows imagenet_default_mean_and_std; "clip" is CLIP's, which SynCLR's
    # util/datasets.py uses unless --inception_norm
    normalization: Literal["imagenet", "inception", "clip"] | None = None
    crop_pct: float | None = None  # eval resize = input_size / crop_pct; None: 224/256 below 384, else 1.0
    eval_interpolation: Literal["bilinear", "bicubic"] = "bilinear"  # the eval Resize's (SynCLR: bicubic)
    # DeiT's RASampler (benchmarks.finetune.sampler): each image 3 times an epoch, floor(n / 256) x 256 entries
    repeated_aug: bool = False
    # the classifier's outputs: "classes" (one per class, 0-based labels) or "reader_official" (the
    # reader's official_num_outputs and official_label_offset: iBOT's CarsDataset head)
    head_outputs: Literal["classes", "reader_official"] = "classes"
    # ---- schedule and batch
    epochs: int = 100
    batch_size: int = 1024  # effective batch per optimisation step (official: batch_size x update_freq x GPUs)
    update_freq: int = 1  # gradient accumulation steps (not in the fingerprint)
    max_batch_per_device: int | None = None  # refuse a per-process batch larger than this (memory)
    lr: float | None = 4e-3  # absolute peak lr (run_class_finetuning.py --lr)
    blr: float | None = None  # or a base lr per 256 images: lr = blr x batch_size / 256 (MAE / SynCLR)
    min_lr: float = 1e-6
    warmup_epochs: int = 20
    # "per_step": BEiT's utils.cosine_scheduler (warm-up from 0); "per_epoch": DeiT's timm cosine stepped
    # after each epoch, warm-up from warmup_lr; "mae": MAE's per-iteration half-cycle cosine
    # (benchmarks.finetune.schedules)
    lr_schedule: Literal["per_step", "per_epoch", "mae"] = "per_step"
    warmup_lr: float = 0.0  # the per_epoch schedule's start (DeiT's --warmup-lr); unused by the others
    warmup_steps: int = -1  # > 0 overrides warmup_epochs
    weight_decay: float = 0.05
    weight_decay_end: float | None = None  # None: constant weight decay
    layer_decay: float = 0.9  # 1.0: one learning rate for every layer
    # the model's no_weight_decay() names (pos_embed, cls_token) without weight decay, as BEiT's
    # optim_factory; False: only 1-D parameters and biases, as timm's create_optimizer on iBOT's
    # VisionTransformer (which declares no no_weight_decay: eval_cls.py's transfer / semi recipes)
    use_no_weight_decay_list: bool = True
    opt_eps: float = 1e-8
    opt_betas: list[float] | None = None  # None: torch's AdamW default (0.9, 0.999)
    clip_grad: float | None = None  # total gradient norm clip; None: off
    # ---- model
    drop_path: float = 0.1
    use_mean_pooling: bool = True  # fc_norm on the mean patch token; False (--use_cls): the normed class token
    init_scale: float = 0.001  # head weight and bias scaled after the trunc-normal (std .02) init
    # start from the pretraining projection head's first n layers (iBOT semi_supervised/eval_cls.py
    # --finetune_head_layer); 0: from the backbone
    finetune_head_layer: int = 0
    model_ema: bool = False
    model_ema_decay: float = 0.9999
    # ---- augmentation (timm create_transform, Mixup)
    color_jitter: float = 0.4
    aa: str | None = "rand-m9-mstd0.5-inc1"
    train_interpolation: str = "bicubic"
    reprob: float = 0.25
    remode: str = "pixel"
    recount: int = 1
    mixup: float = 0.0
    cutmix: float = 0.0
    cutmix_minmax: list[float] | None = None
    mixup_prob: float = 1.0
    mixup_switch_prob: float = 0.5
    mixup_mode: Literal["batch", "pair", "elem"] = "batch"
    smoothing: float = 0.1
    # ---- which number is the result
    eval_every: int = 1  # evaluate on the val split every n epochs (and after the last)
    # ---- execution (not in the fingerprint)
    seed: int = 0
    max_steps: int | None = None  # stop after this many optimisation steps (the schedules still span `epochs`)
    resume_every: int = 0  # also write resume.pt every n optimisation steps (0: at each epoch end only)
    resume: str | None = None  # go on from this resume.pt instead of the run's own (it must be this recipe's)
    num_workers: int = 0
    eval_batch_size: int = 128
    precision: Literal["fp32", "fp16", "bf16"] = "fp32"
    device: str = "auto"
    save_checkpoint: bool = True  # write the fine-tuned backbone as a harness checkpoint
    progress: bool = True

    def __post_init__(self):
        if (self.lr is None) == (self.blr is None):
            raise ConfigError(f"finetune: set exactly one of lr (absolute) and blr (per 256 images), found "
                              f"lr={self.lr} blr={self.blr}")
        positive = {"epochs": self.epochs, "batch_size": self.batch_size, "update_freq": self.update_freq,
                    "input_size": self.input_size, "eval_every": self.eval_every}
        bad = {k: v for k, v in positive.items() if v < 1}
        if bad:
            raise ConfigError(f"finetune: {', '.join(f'{k}={v}' for k, v in bad.items())} must be >= 1")
        if not 0.0 < self.layer_decay <= 1.0:
            raise ConfigError(f"finetune: layer_decay must be in (0, 1], found {self.layer_decay}")
        if self.finetune_head_layer < 0:
            raise ConfigError(f"finetune: finetune_head_layer must be >= 0, found {self.finetune_head_layer}")
        if self.lr_schedule != "per_step" and self.warmup_steps > 0:
            raise ConfigError(f"finetune: warmup_steps belongs to the per_step schedule; lr_schedule "
                              f"{self.lr_schedule!r} warms up over warmup_epochs")
        if self.lr_schedule == "mae" and self.epochs <= self.warmup_epochs:
            raise ConfigError(f"finetune: the mae schedule needs epochs > warmup_epochs, found {self.epochs} and "
                              f"{self.warmup_epochs}")
        if self.opt_betas is not None and len(self.opt_betas) != 2:
            raise ConfigError(f"finetune: opt_betas takes two numbers, found {self.opt_betas}")

    def peak_lr(self) -> float:
        return float(self.lr) if self.lr is not None else float(self.blr) * self.batch_size / 256.0

    def mixup_active(self) -> bool:
        return self.mixup > 0 or self.cutmix > 0 or self.cutmix_minmax is not None


# Settings that say how the number is computed, not which number: left out of the fingerprint
# (train_subset is there because harness.data.subsets folds the subset's content in instead).
EXECUTION_SETTINGS = ("train_subset", "update_freq", "max_batch_per_device", "resume_every", "resume", "num_workers",
                      "eval_batch_size", "device", "save_checkpoint", "progress")


def per_device_batch(cfg: FinetuneConfig, world_size: int) -> int:
    """The batch each process draws per micro-step; a ConfigError when the effective batch cannot
    be reached with this accumulation on this many processes."""
    share = cfg.update_freq * world_size
    if cfg.batch_size % share:
        raise ConfigError(
            f"finetune: the effective batch {cfg.batch_size} cannot be reached with update_freq "
            f"{cfg.update_freq} on {world_size} process(es): it must be a multiple of update_freq x processes "
            f"({share}); set update_freq so that {cfg.batch_size} / (update_freq x {world_size}) is whole")
    per = cfg.batch_size // share
    if cfg.max_batch_per_device is not None and per > cfg.max_batch_per_device:
        need = -(-cfg.batch_size // (world_size * cfg.max_batch_per_device))
        raise ConfigError(
            f"finetune: the effective batch {cfg.batch_size} needs {per} images per process per step with "
            f"update_freq {cfg.update_freq} on {world_size} process(es), above max_batch_per_device "
            f"{cfg.max_batch_per_device}; set update_freq to at least {need} (a divisor of the batch per process)")
    if cfg.mixup_active() and per % 2:
        raise ConfigError(f"finetune: mixup / cutmix (timm Mixup) needs an even batch per process "
                          f"per step, found {per} ({cfg.batch_size} / (update_freq {cfg.update_freq} x {world_size}))")
    return per
