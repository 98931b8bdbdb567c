"""The settings both segmentation protocols share (``SegConfig``; each protocol subclasses it
with its own lr sweep and head).

Sources of every default (CrIBo = github.com/tileb1/CrIBo @ 311f569, segmentation/ and
eval_launcher.py; mmseg = mmsegmentation 1.2.2 configs/_base_ and configs/segmenter;
README.md gives file and line for each):
- data pipelines, test scales, sliding-window test: mmseg's dataset configs (as CrIBo's);
- normalisation mean = std = 127.5 (RGB): mmseg's Segmenter model config, kept by CrIBo
  although its backbones were pretrained with ImageNet mean/std -- configurable here;
- Adam, PolyLR power 0.9, eta_min = lr / 10: CrIBo's schedule configs + ``update_cfg``
  in its tools/train.py (which sets eta_min = lr / 10 for every run, linear included);
- weight decay 0.01 and total batch 4: CrIBo's eval_launcher defaults ``--mmseg_wd`` and
  ``--mmseg_samples_per_gpu`` (its update_cfg writes them into the config); the launcher runs
  train.py in one process (launcher 'none'), so 4 per GPU is the total batch;
- validation every iters / 10 and at the end, the last one being the reported number:
  CrIBo's schedule configs (val_interval) and mmengine's IterBasedTrainLoop;
- left open by the official code, named as settings here: the schedule (``schedule``: the
  launcher takes any config file; the paper's text gives 160k / 80k) and the learning rates
  (``lr_sweep``: the launcher's default 0.01 is a command-line value; the paper's text gives
  the sweep and reports its best).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar, Literal

from benchmarks.segmentation.layouts import seg_sizes

# CrIBo's eval_launcher.py --mmseg_lr default (its update_cfg writes it over the configs' 1e-3).
LAUNCHER_LR = 0.01
SCHEDULES = ("long", "short")
LR_SWEEPS = ("paper", "launcher_default")


@dataclass
class SegConfig:
    """Settings shared by both protocols (each protocol sets its own lr sweep and head).

    ``schedule`` / ``iters`` and ``lr_sweep`` / ``lrs`` are each one choice stated two ways:
    the name, or the value. Give either; the other follows (a value that is not the named
    choice's reads ``custom``); both, disagreeing, is an error.
    """

    PAPER_LRS: ClassVar[tuple[float, ...]] = ()  # the protocol's sweep from the paper's text

    dataset: str = "ade20k"
    crop_size: int = 512
    # long: 160k (ADE20K, COCO-Stuff) / 80k (VOC, Context), the paper's text and the only
    # length of CrIBo's linear configs; short: 40k / 20k, CrIBo's other Segmenter configs.
    # CrIBo's launcher runs whichever config file it is given (eval_launcher.py:38).
    schedule: Literal["long", "short", "custom"] | None = None  # None: long, or custom if iters
    iters: int | None = None            # None: the schedule's, by dataset
    # paper: the sweep of the paper's text, best reported; launcher_default: CrIBo's
    # eval_launcher.py default lr 0.01 alone. The official code runs one lr per launch.
    lr_sweep: Literal["paper", "launcher_default", "custom"] | None = None  # None: paper, or custom
    lrs: list[float] | None = None      # None: the lr_sweep's
    eta_min_ratio: float = 0.1          # PolyLR floor = ratio x lr (CrIBo's update_cfg)
    poly_power: float = 0.9
    weight_decay: float = 0.01          # CrIBo's --mmseg_wd default
    batch_size: int = 4                 # total over all GPUs; CrIBo's --mmseg_samples_per_gpu, one process
    mean: list[float] = field(default_factory=lambda: [127.5, 127.5, 127.5])  # RGB, 0..255
    std: list[float] = field(default_factory=lambda: [127.5, 127.5, 127.5])
    img_scale: list[int] | None = None  # (long, short) of Resize/RandomResize; None: dataset's x crop/512
    slide_stride: int | None = None     # None: 480/512 of the crop, as mmseg
    drop_path_rate: float = 0.0         # backbone stochastic depth while training
    amp: bool = False
    seed: int = 0
    # Validations during training, each recorded; the last (at iters) is the reported number.
    # None: every iters / 10 (CrIBo's schedule configs) and at the end; 0: only at the end.
    val_interval: int | None = None
    # ---- execution only (not in the fingerprint)
    num_workers: int = 2
    checkpoint_interval: int | None = None  # None: iters / 10 (CrIBo: 16k of 160k)
    log_interval: int = 50
    work_dir: str | None = None         # None: $SSL_BENCH_HOME/mmseg/<model>/<fingerprint>
    resume: bool = True
    launcher: Literal["auto", "none", "pytorch", "slurm"] = "auto"

    def __post_init__(self):
        spec = seg_sizes(self.dataset)
        problems = []
        named_iters = {"long": spec.long_iters, "short": spec.short_iters}
        self.schedule, self.iters = _resolve_named(
            "schedule", self.schedule, "long", named_iters, "iters", self.iters, problems)
        named_lrs = {"paper": list(self.PAPER_LRS), "launcher_default": [LAUNCHER_LR]}
        self.lr_sweep, self.lrs = _resolve_named(
            "lr_sweep", self.lr_sweep, "paper", named_lrs, "lrs",
            None if self.lrs is None else [float(x) for x in self.lrs], problems)
        if problems:
            raise ValueError("; ".join(problems))
        if self.iters < 1 or self.batch_size < 1 or self.crop_size < 1:
            problems.append(f"iters, batch_size and crop_size must be >= 1, found {self.iters}, "
                            f"{self.batch_size}, {self.crop_size}")
        if not self.lrs or min(self.lrs) <= 0:
            problems.append(f"lrs must be a non-empty list of positive learning rates, found {self.lrs}")
        if len(self.mean) != 3 or len(self.std) != 3 or min(self.std) <= 0:
            problems.append(f"mean and std must be 3 numbers (std > 0), found {self.mean}, {self.std}")
        if self.img_scale is not None and len(self.img_scale) != 2:
            problems.append(f"img_scale must be [long, short], found {self.img_scale}")
        if self.val_interval is not None and self.val_interval < 0:
            problems.append(f"val_interval must be >= 0 (0: only at the end), found {self.val_interval}")
        if problems:
            raise ValueError("; ".join(problems))

    def validation_interval(self) -> int:
        """Iterations between validations (the last iteration always validates)."""
        if self.val_interval is None:
            return max(1, self.iters // 10)
        return self.val_interval or self.iters

    # derived sizes ---------------------------------------------------------
    def scale(self) -> tuple[int, int]:
        if self.img_scale is not None:
            return tuple(self.img_scale)
        rw, rh = seg_sizes(self.dataset).scale_ratio
        return (round(rw * self.crop_size), round(rh * self.crop_size))

    def train_crop(self) -> int:
        return round(seg_sizes(self.dataset).train_crop_ratio * self.crop_size)

    def stride(self) -> int:
        return self.slide_stride or round(self.crop_size * 480 / 512)


EXECUTION_ONLY = ("num_workers", "checkpoint_interval", "log_interval", "work_dir", "resume", "launcher")


def _resolve_named(name_key: str, name, default: str, named: dict, value_key: str, value,
                   problems: list[str]):
    """(name, value) of a choice given by name or by value (see :class:`SegConfig`)."""
    if value is None:
        if name is None:
            name = default
        if name == "custom":
            problems.append(f"{name_key} 'custom' needs {value_key}; give {value_key}, or name one of "
                            f"{', '.join(named)}")
            return name, value
        return name, named[name]
    matching = next((n for n, v in named.items() if v == value), "custom")
    if name is None or name == matching:
        return matching, value
    if name == "custom":  # a value that happens to equal a named choice keeps its name
        return matching, value
    problems.append(f"{name_key} {name!r} means {value_key} = {named[name]}, but {value_key} = {value} "
                    f"was given too; set {value_key} to null to use {name!r}, or drop {name_key}")
    return name, value
