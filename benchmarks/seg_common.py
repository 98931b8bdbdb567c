"""What ``seg_linear`` and ``segmenter`` share: the settings, the datasets, the mmengine
config built from them, the run of one learning rate, the sweep, and the result records.

Both protocols are CrIBo's (Tables 2 and 3), which run mmsegmentation 1.x's Segmenter
configs through mmengine's Runner; so do these, with the configs generated here from the
harness's dataclass settings instead of Python config files. mmcv / mmengine / mmseg are
imported inside functions only: the rest of the harness never imports them, and a
missing install surfaces as :class:`MissingDependencyError` naming the install command.

Sources of every default (CrIBo = github.com/tileb1/CrIBo @ 311f569, segmentation/ and
eval_launcher.py; mmseg = mmsegmentation 1.2.2 configs/_base_ and configs/segmenter;
docs/PROTOCOLS.md gives file and line for each):
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

import contextlib
import csv
import logging
import math
import os
import pickle
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Literal

import torch

from harness.data.transforms import IMAGENET_MEAN, IMAGENET_STD
from harness.errors import ConfigError, DataError, MissingDependencyError, NotApplicable

log = logging.getLogger(__name__)

INSTALL_COMMAND = "bash scripts/install_mmcv.sh"
MMSEG_VERSION = "1.2.2"
# The CPU checkpoints are pretrained with ImageNet's mean/std: the synth presets read pixels
# the same way (on 0..255 RGB, as mmseg's SegDataPreProcessor wants them).
PRETRAIN_MEAN_255 = [round(255 * m, 3) for m in IMAGENET_MEAN]
PRETRAIN_STD_255 = [round(255 * s, 3) for s in IMAGENET_STD]


# ============================================================================ dependency
def require_mmseg() -> None:
    """Import the mmseg stack or raise :class:`MissingDependencyError` saying how to install it."""
    try:
        import mmcv
        import mmcv.ops  # noqa: F401  (needs the compiled extension)
        import mmengine  # noqa: F401
        import mmseg
        import mmseg.models  # noqa: F401
    except (ImportError, OSError) as exc:
        raise MissingDependencyError(
            f"the segmentation protocols need mmcv {'2.1.0'} with compiled ops, mmengine 0.10.7 and "
            f"mmsegmentation {MMSEG_VERSION}; importing them failed ({type(exc).__name__}: {exc}). "
            f"Install them with `{INSTALL_COMMAND}` (uses a prebuilt wheel from $MMCV_WHEEL_DIR "
            f"when set, else compiles mmcv, ~30 min on 2 cores)") from exc
    except AssertionError as exc:  # mmseg asserts the mmcv / mmengine version range on import
        raise MissingDependencyError(
            f"installed mmcv/mmengine do not fit mmsegmentation {MMSEG_VERSION} ({exc}); "
            f"run `{INSTALL_COMMAND} --force`") from exc
    if mmseg.__version__ != MMSEG_VERSION or not mmcv.__version__.startswith("2.1."):
        raise MissingDependencyError(
            f"found mmseg {mmseg.__version__} / mmcv {mmcv.__version__}, the protocols are pinned "
            f"to mmseg {MMSEG_VERSION} / mmcv 2.1.x; run `{INSTALL_COMMAND} --force`")


# ============================================================================ datasets
@dataclass(frozen=True)
class SegDataset:
    """One of mmseg's dataset configs, with sizes relative to the 512 crop they assume."""

    name: str
    mmseg_type: str
    num_classes: int
    long_iters: int                                 # CrIBo's *-160k / *-80k configs
    short_iters: int                                # its Segmenter-only *-40k / *-20k configs
    reduce_zero_label: bool
    layout: Literal["ade", "voc", "context", "coco_stuff"]
    scale_ratio: tuple[float, float] = (4.0, 1.0)  # Resize scale / crop: (2048, 512) at 512
    train_crop_ratio: float = 1.0                   # pipeline RandomCrop / crop (Context: 480 / 512)
    pad_train: bool = False                         # voc12aug's extra Pad(crop) in the pipeline
    seg_map_suffix: str = ".png"


DATASETS: dict[str, SegDataset] = {
    "ade20k": SegDataset("ade20k", "ADE20KDataset", 150, 160_000, 40_000, True, "ade"),
    "voc12aug": SegDataset("voc12aug", "PascalVOCDataset", 21, 80_000, 20_000, False, "voc", pad_train=True),
    # CrIBo's configs/_base_/datasets/pascal_context.py: 60 classes (background included).
    "pascal_context": SegDataset("pascal_context", "PascalContextDataset", 60, 80_000, 20_000, False,
                                 "context", scale_ratio=(520 / 512, 520 / 512), train_crop_ratio=480 / 512),
    # mmseg's pascal_context_59.py: background ignored (reduce_zero_label).
    "pascal_context_59": SegDataset("pascal_context_59", "PascalContextDataset59", 59, 80_000, 20_000, True,
                                    "context", scale_ratio=(520 / 512, 520 / 512),
                                    train_crop_ratio=480 / 512),
    "coco_stuff164k": SegDataset("coco_stuff164k", "COCOStuffDataset", 171, 160_000, 40_000, False,
                                 "coco_stuff", seg_map_suffix="_labelTrainIds.png"),
}
# synth_*: SynthScenes' copies of the layouts (any root with a SynthScenes meta.json is read
# with its own class names whatever the name used).
ALIASES = {"voc": "voc12aug", "ade": "ade20k", "coco_stuff": "coco_stuff164k",
           "pascal_context_60": "pascal_context", "synth_ade": "ade20k", "synth_voc": "voc12aug"}


def dataset_spec(name: str) -> SegDataset:
    key = ALIASES.get(name, name)
    if key not in DATASETS:
        raise ConfigError(f"segmentation dataset {name!r} is unknown; choose one of "
                          f"{', '.join(sorted(DATASETS))} (aliases: {', '.join(sorted(ALIASES))})")
    return DATASETS[key]


@dataclass
class ResolvedData:
    """Where the data is and how mmseg reads it (mmseg dataset dicts, without pipelines)."""

    spec: SegDataset
    root: Path
    classes: tuple[str, ...] | None  # SynthScenes class names (None: the mmseg dataset's own)
    train: list[dict]                # one dict per dataset concatenated for training
    val: dict
    train_lists: list[str]           # what was used, for the record

    @property
    def num_classes(self) -> int:
        return len(self.classes) if self.classes else self.spec.num_classes

    @property
    def is_synthetic(self) -> bool:
        return self.classes is not None


def _first_dir(root: Path, candidates: list[Path], marker: str, what: str) -> Path:
    if not root.exists():
        raise DataError(f"{what} root {root} does not exist")
    for c in candidates:
        if (c / marker).exists():
            return c
    raise DataError(f"no {what} layout under {root}: expected {marker} in one of "
                    f"{', '.join(str(c) for c in candidates)}")


def resolve_data(name: str, data_root: str | Path) -> ResolvedData:
    """Find the dataset folders under ``data_root`` (the real layouts or SynthScenes')."""
    from harness.data.io import find_synth_meta
    from harness.data.segmentation import ADE20KSegmentation, VOCSegmentation

    spec = dataset_spec(name)
    root = Path(data_root).expanduser().resolve()
    common = dict(reduce_zero_label=spec.reduce_zero_label, img_suffix=".jpg",
                  seg_map_suffix=spec.seg_map_suffix)
    if spec.layout == "ade":
        base = ADE20KSegmentation._resolve_root(root)  # the harness readers' layout rules
        train = [dict(data_prefix=dict(img_path="images/training", seg_map_path="annotations/training"))]
        val = dict(data_prefix=dict(img_path="images/validation", seg_map_path="annotations/validation"))
        lists = ["images/training"]
    elif spec.layout == "voc":
        base = VOCSegmentation._resolve_root(root)
        sets = base / "ImageSets" / "Segmentation"
        if (sets / "aug.txt").is_file():
            # mmseg's pascal_voc12_aug.py (and CrIBo's): train.txt + aug.txt, concatenated.
            train = [dict(data_prefix=dict(img_path="JPEGImages", seg_map_path="SegmentationClass"),
                          ann_file="ImageSets/Segmentation/train.txt"),
                     dict(data_prefix=dict(img_path="JPEGImages", seg_map_path="SegmentationClassAug"),
                          ann_file="ImageSets/Segmentation/aug.txt")]
            lists = ["train.txt", "aug.txt"]
        elif (sets / "trainaug.txt").is_file():
            # The common single-list layout (and SynthScenes'): trainaug.txt over SegmentationClassAug.
            train = [dict(data_prefix=dict(img_path="JPEGImages", seg_map_path="SegmentationClassAug"),
                          ann_file="ImageSets/Segmentation/trainaug.txt")]
            lists = ["trainaug.txt"]
        else:
            raise DataError(f"Pascal VOC aug lists not found in {sets}: expected aug.txt (mmseg's "
                            f"tools/dataset_converters/voc_aug.py) or trainaug.txt")
        val = dict(data_prefix=dict(img_path="JPEGImages", seg_map_path="SegmentationClass"),
                   ann_file="ImageSets/Segmentation/val.txt")
    elif spec.layout == "context":
        base = _first_dir(root, [root, root / "VOC2010", root / "VOCdevkit" / "VOC2010"],
                          "SegmentationClassContext", "Pascal Context (VOC2010)")
        prefix = dict(img_path="JPEGImages", seg_map_path="SegmentationClassContext")
        train = [dict(data_prefix=prefix, ann_file="ImageSets/SegmentationContext/train.txt")]
        val = dict(data_prefix=dict(prefix), ann_file="ImageSets/SegmentationContext/val.txt")
        lists = ["train.txt"]
    else:
        base = _first_dir(root, [root, root / "coco_stuff164k"], "annotations/train2017", "COCO-Stuff 164k")
        train = [dict(data_prefix=dict(img_path="images/train2017", seg_map_path="annotations/train2017"))]
        val = dict(data_prefix=dict(img_path="images/val2017", seg_map_path="annotations/val2017"))
        lists = ["images/train2017"]

    for d in train + [val]:
        d.update(common, data_root=str(base))
        for key in ("img_path", "seg_map_path"):
            if not (base / d["data_prefix"][key]).is_dir():
                raise DataError(f"{spec.name}: folder {base / d['data_prefix'][key]} not found; "
                                f"the dataset is incomplete")
        if "ann_file" in d and not (base / d["ann_file"]).is_file():
            raise DataError(f"{spec.name}: split list {base / d['ann_file']} not found")

    meta = find_synth_meta(base, levels=2)
    classes = None
    if name.startswith("synth_") and not meta:
        raise DataError(f"dataset {name!r} is SynthScenes' {spec.name} layout, but {base} has no "
                        f"SynthScenes meta.json; generate one with `ssl-bench data synth --out DIR` "
                        f"or name the real dataset ({spec.name})")
    if meta:
        names = meta.get("classes", {}).get("ade20k" if spec.layout == "ade" else "voc")
        if not names or spec.layout not in ("ade", "voc"):
            raise DataError(f"{base} is a SynthScenes root but has no {spec.name} class list")
        classes = tuple(names)
        for d in train + [val]:
            # mmseg's VOC/ADE dataset classes would remap SynthScenes' labels through their own
            # class lists; the generic dataset with SynthScenes' names reads them as written.
            d["metainfo"] = dict(classes=classes)
    return ResolvedData(spec, base, classes, train, val, lists)


# ============================================================================ settings
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
        spec = dataset_spec(self.dataset)
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
        rw, rh = dataset_spec(self.dataset).scale_ratio
        return (round(rw * self.crop_size), round(rh * self.crop_size))

    def train_crop(self) -> int:
        return round(dataset_spec(self.dataset).train_crop_ratio * self.crop_size)

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


# ============================================================================ mmengine config
def _world_size(launcher: str) -> int:
    if launcher == "slurm":
        return int(os.environ.get("SLURM_NTASKS", "1"))
    return int(os.environ.get("WORLD_SIZE", "1")) if launcher != "none" else 1


def resolve_launcher(launcher: str) -> str:
    if launcher != "auto":
        return launcher
    return "pytorch" if int(os.environ.get("WORLD_SIZE", "1")) > 1 else "none"


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
    if data.spec.pad_train:
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
    world = _world_size(launcher)
    if cfg.batch_size % world:
        raise ConfigError(f"batch_size {cfg.batch_size} is not divisible by the {world} processes")
    train_pipe, test_pipe = pipelines(cfg, data)
    dataset_type = "BaseSegDataset" if data.is_synthetic else data.spec.mmseg_type
    train_sets = [dict(type=dataset_type, pipeline=train_pipe, **d) for d in data.train]
    train_set = train_sets[0] if len(train_sets) == 1 else dict(type="ConcatDataset", datasets=train_sets)
    val_set = dict(type=dataset_type, pipeline=test_pipe, **data.val)
    nw = cfg.num_workers
    crop = (cfg.crop_size, cfg.crop_size)
    ckpt_every = cfg.checkpoint_interval or max(1, cfg.iters // 10)
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
        model=dict(
            type="EncoderDecoder",
            data_preprocessor=dict(type="SegDataPreProcessor", mean=list(cfg.mean), std=list(cfg.std),
                                   bgr_to_rgb=True, pad_val=0, seg_pad_val=255, size=crop),
            backbone=backbone,
            decode_head=decode_head,
            test_cfg=dict(mode="slide", crop_size=crop, stride=(cfg.stride(), cfg.stride())),
        ),
        optim_wrapper=dict(type="AmpOptimWrapper" if cfg.amp else "OptimWrapper",
                           optimizer=dict(type="Adam", lr=lr, weight_decay=cfg.weight_decay),
                           clip_grad=None),
        param_scheduler=[dict(type="PolyLR", eta_min=lr * cfg.eta_min_ratio, power=cfg.poly_power,
                              begin=0, end=cfg.iters, by_epoch=False)],
        train_cfg=dict(type="IterBasedTrainLoop", max_iters=cfg.iters,
                       val_interval=cfg.validation_interval()),
        val_cfg=dict(type="ValLoop"),
        default_hooks=dict(
            timer=dict(type="IterTimerHook"),
            logger=dict(type="LoggerHook", interval=cfg.log_interval, log_metric_by_epoch=False),
            param_scheduler=dict(type="ParamSchedulerHook"),
            checkpoint=dict(type="CheckpointHook", by_epoch=False, interval=ckpt_every,
                            max_keep_ckpts=1, save_last=True),
            sampler_seed=dict(type="DistSamplerSeedHook"),
        ),
        train_dataloader=dict(batch_size=cfg.batch_size // world, num_workers=nw,
                              persistent_workers=nw > 0,
                              sampler=dict(type="InfiniteSampler", shuffle=True), dataset=train_set),
        val_dataloader=dict(batch_size=1, num_workers=nw, persistent_workers=nw > 0,
                            sampler=dict(type="DefaultSampler", shuffle=False), dataset=val_set),
        # every validation rewrites the per-class table: the file left is the last one's
        val_evaluator=dict(type="SslBenchIoUMetric", iou_metrics=["mIoU"], csv_path=str(csv_path)),
        custom_hooks=[dict(type="SslBenchValidationLog",
                           path=str(validation_log or Path(work_dir) / VALIDATION_LOG))],
    )
    # yapf formatting of the dumped config costs seconds per checkpoint (mmengine stores the
    # config text in every checkpoint); the unformatted text is the same config.
    return Config(d, format_python_code=False)


# ============================================================================ mmseg-side pieces
_METRIC_REGISTERED = False


def register_metric() -> None:
    """``SslBenchIoUMetric``: mmseg's IoUMetric that also writes the per-class table as CSV."""
    global _METRIC_REGISTERED
    if _METRIC_REGISTERED:
        return
    import numpy as np
    from mmseg.evaluation import IoUMetric
    from mmseg.registry import METRICS

    class SslBenchIoUMetric(IoUMetric):
        def __init__(self, csv_path: str | None = None, **kwargs):
            super().__init__(**kwargs)
            self.csv_path = csv_path

        def compute_metrics(self, results: list) -> dict:
            metrics = super().compute_metrics(results)
            if self.csv_path:
                inter, union, pred, label = (sum(r[i] for r in results) for i in range(4))
                iou = (inter / union).cpu().numpy()
                acc = (inter / label).cpu().numpy()
                rows = [("class", "IoU", "Acc", "pixels")]
                for name, i, a, n in zip(self.dataset_meta["classes"], iou, acc, label.cpu().numpy()):
                    rows.append((name, _pct(i), _pct(a), int(n)))
                Path(self.csv_path).parent.mkdir(parents=True, exist_ok=True)
                with open(self.csv_path, "w", newline="") as f:
                    csv.writer(f).writerows(rows)
            return metrics

    def _pct(x) -> str:
        return "" if np.isnan(x) else f"{100 * float(x):.2f}"

    METRICS.register_module(name="SslBenchIoUMetric", module=SslBenchIoUMetric, force=True)
    _register_validation_log()
    _METRIC_REGISTERED = True


VALIDATION_LOG = "validations.jsonl"


def _register_validation_log() -> None:
    """``SslBenchValidationLog``: a hook that keeps every validation's metrics by iteration.

    In memory on every rank (the evaluator hands all ranks the same metrics) and, on the
    main process, appended to a JSON-lines file, so that a resumed run still knows the
    validations of the sessions before it.
    """
    import json

    from mmengine.dist import is_main_process
    from mmengine.hooks import Hook
    from mmengine.registry import HOOKS

    class SslBenchValidationLog(Hook):
        priority = "VERY_LOW"

        def __init__(self, path: str):
            self.path = Path(path)
            self.history: dict[int, dict[str, float]] = {}

        def after_val_epoch(self, runner, metrics=None) -> None:
            values = {k: round(float(v), 2) for k, v in (metrics or {}).items()
                      if isinstance(v, (int, float)) or getattr(v, "ndim", None) == 0}
            self.history[int(runner.iter)] = values
            if is_main_process():
                self.path.parent.mkdir(parents=True, exist_ok=True)
                with open(self.path, "a") as f:
                    f.write(json.dumps({"iter": int(runner.iter), "metrics": values}) + "\n")

    HOOKS.register_module(name="SslBenchValidationLog", module=SslBenchValidationLog, force=True)


def read_validation_log(path: Path) -> dict[int, dict[str, float]]:
    """{iteration: metrics} from a validation log (a later line for the same iteration wins)."""
    import json

    out: dict[int, dict[str, float]] = {}
    if Path(path).is_file():
        for line in Path(path).read_text().splitlines():
            if line.strip():
                entry = json.loads(line)
                out[int(entry["iter"])] = entry["metrics"]
    return out


def _history_buffer_getattr(obj, name: str):
    """``getattr`` as mmengine's checkpoints need it, and nothing more.

    ``HistoryBuffer.__getstate__`` pickles its statistics methods, which pickle writes as
    ``getattr(HistoryBuffer, "min")`` etc. Allow-listing the real ``builtins.getattr`` would
    let a checkpoint fetch any attribute of any object it can build; this one only hands
    out HistoryBuffer's registered statistics methods.
    """
    from mmengine.logging.history_buffer import HistoryBuffer

    allowed = {"min", "max", "current", "mean", *HistoryBuffer._statistics_methods}
    if obj is HistoryBuffer and isinstance(name, str) and name in allowed:
        return getattr(HistoryBuffer, name)
    raise pickle.UnpicklingError(
        f"getattr({obj!r}, {name!r}) is not allowed when loading an mmengine checkpoint")


def weights_only_globals() -> list:
    """What mmengine's checkpoints hold besides tensors, for torch's weights-only unpickler.

    mmengine 0.10.7 calls ``torch.load`` without ``weights_only``; torch >= 2.6 then refuses
    its checkpoints (message-hub history buffers holding numpy arrays and scalars, and their
    statistics methods). Allowing exactly these -- scoped to our runs, see
    :func:`mmengine_checkpoint_loading` -- keeps weights-only loading on.
    """
    import numpy as np
    from mmengine.logging.history_buffer import HistoryBuffer

    try:
        from numpy._core import multiarray as ma
    except ImportError:  # numpy < 2
        from numpy.core import multiarray as ma
    allowed: list = [HistoryBuffer, np.ndarray, np.dtype, ma._reconstruct, ma.scalar]
    # numpy >= 1.25 rebuilds a dtype through its class (numpy.dtypes.Float64DType, ...)
    allowed += sorted({type(np.dtype(t)) for t in ("float64", "float32", "float16", "int64", "int32",
                                                   "int16", "int8", "uint8", "bool")}, key=str)
    # checkpoints written under numpy 1.x name these numpy.core.multiarray.*
    allowed += [(ma._reconstruct, "numpy.core.multiarray._reconstruct"),
                (ma.scalar, "numpy.core.multiarray.scalar")]
    allowed += [(_history_buffer_getattr, "builtins.getattr"),
                (_history_buffer_getattr, "__builtin__.getattr")]
    return allowed


@contextlib.contextmanager
def mmengine_checkpoint_loading():
    """Scoped allow-list for torch's weights-only loading of mmengine checkpoints."""
    with torch.serialization.safe_globals(weights_only_globals()):
        yield


# ============================================================================ one run, the sweep
def run_one(cfg: SegConfig, data: ResolvedData, *, backbone: dict, decode_head: dict, lr: float,
            work_dir: Path, tag: str) -> dict:
    """Train one learning rate, validating as CrIBo's schedules do.

    Returns {lr, metrics, validations, reported_iter, csv, validation_log, work_dir, iters}:
    ``metrics`` are the last validation's (at ``iters``), ``validations`` every
    (iteration, mIoU) in order.
    """
    from mmengine.dist import is_main_process
    from mmengine.runner import Runner

    work_dir.mkdir(parents=True, exist_ok=True)
    csv_path = work_dir / "per_class_iou.csv"
    log_path = work_dir / VALIDATION_LOG
    if cfg.resume:
        earlier = read_validation_log(log_path)
    else:
        earlier = {}
        if is_main_process():
            log_path.unlink(missing_ok=True)
    # A learning rate whose last validation an earlier session logged is done: read it back
    # (mmengine would first replay the whole data loader to find nothing left to train).
    if not (cfg.iters in earlier and csv_path.is_file()):
        experiment = f"{tag}_lr{lr:g}_{uuid.uuid4().hex[:6]}"
        mm_cfg = build_mmseg_config(cfg, data, backbone=backbone, decode_head=decode_head, lr=lr,
                                    work_dir=work_dir, csv_path=csv_path, experiment=experiment,
                                    validation_log=log_path)
        runner = Runner.from_cfg(mm_cfg)
        with mmengine_checkpoint_loading():
            runner.train()
            hook = next(h for h in runner.hooks if type(h).__name__ == "SslBenchValidationLog")
            if cfg.iters not in hook.history:
                # resumed from the last checkpoint of a run whose final validation did not finish
                runner.val()
        earlier.update(hook.history)
    history = dict(sorted(earlier.items()))
    return {"lr": lr, "metrics": dict(history[cfg.iters]), "reported_iter": cfg.iters,
            "validations": [[it, m.get("mIoU")] for it, m in history.items()],
            "csv": str(csv_path), "validation_log": str(log_path), "work_dir": str(work_dir),
            "iters": cfg.iters}


def run_seg_protocol(backbone_state_dict: dict[str, torch.Tensor], arch_kwargs: dict, cfg: SegConfig,
                     data_root: str | Path, work_dir: str | Path, *, head: str,
                     frozen: bool) -> list[dict]:
    """The protocol as a plain function: every lr of ``cfg.lrs``, one dict per lr.

    ``arch_kwargs`` needs ``num_heads`` (the rest is read off the state dict). ``head``:
    "linear" (FCNHead, num_convs=0) or "mask" (SegmenterMaskTransformerHead).
    """
    from benchmarks import mmseg_bridge

    require_mmseg()
    import mmseg.datasets  # noqa: F401  (registers datasets, transforms)
    import mmseg.evaluation  # noqa: F401
    import mmseg.models  # noqa: F401

    mmseg_bridge.register_mmseg_modules()
    register_metric()
    data = resolve_data(cfg.dataset, data_root)
    work_dir = Path(work_dir)
    weights = mmseg_bridge.save_converted(backbone_state_dict, work_dir / "backbone_mmseg.safetensors")
    backbone = backbone_config(backbone_state_dict, arch_kwargs, cfg, frozen=frozen, weights=weights)
    decode_head = head_config(head, backbone["embed_dims"], backbone["num_heads"], data.num_classes)
    out = []
    for lr in cfg.lrs:
        log.info("%s on %s: lr %g, %d iterations", head, cfg.dataset, lr, cfg.iters)
        res = run_one(cfg, data, backbone=backbone, decode_head=decode_head, lr=lr,
                      work_dir=work_dir / f"lr{lr:g}", tag=f"{head}_{data.spec.name}")
        res.update(dataset=data.spec.name, num_classes=data.num_classes, train_lists=data.train_lists,
                   synthetic=data.is_synthetic)
        out.append(res)
    return out


def backbone_config(backbone_state_dict: dict[str, torch.Tensor], arch_kwargs: dict, cfg: SegConfig, *,
                    frozen: bool, weights: str | Path | None = None) -> dict:
    """The mmseg backbone (``SslBenchViT``) of a run.

    A frozen backbone's mode while the head trains is ``cfg.frozen_backbone_mode`` (seg_linear's
    setting; "eval" where a config has none): "train" as CrIBo (DropPath at ``drop_path_rate``
    on the frozen features), "eval" deterministic (built with drop path 0).
    """
    from benchmarks import mmseg_bridge

    if "num_heads" not in arch_kwargs:
        raise ConfigError(f"arch_kwargs must give num_heads, found {sorted(arch_kwargs)}")
    mode = getattr(cfg, "frozen_backbone_mode", "eval") if frozen else "eval"
    drop_path = cfg.drop_path_rate if (not frozen or mode == "train") else 0.0
    bk = mmseg_bridge.backbone_kwargs(backbone_state_dict, int(arch_kwargs["num_heads"]), cfg.crop_size,
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


# ============================================================================ protocol glue
def best_of(runs: list[dict], key: str = "mIoU") -> dict:
    finite = [r for r in runs if not math.isnan(r["metrics"].get(key, float("nan")))]
    if not finite:
        raise RuntimeError(f"no run of the sweep produced a finite {key}")
    return max(finite, key=lambda r: r["metrics"][key])


def to_results(runs: list[dict], cfg: SegConfig, split: str = "val") -> list:
    """One ProtocolResult per lr (variant lr=<lr>) + the best over the sweep (variant lr=best).

    Every record names the lr its number comes from (params ``lr``) and carries all the
    validations of that lr's training (params ``validations``: [iteration, mIoU] pairs);
    the number is the last validation's (``reported_iter`` = iters), CrIBo's final one.
    """
    from benchmarks.base import ProtocolResult

    def params(r: dict) -> dict:
        return {"lr": r["lr"], "eta_min": r["lr"] * cfg.eta_min_ratio, "iters": r["iters"],
                "num_classes": r["num_classes"], "train_lists": r["train_lists"],
                "synthetic": r["synthetic"], "validations": r["validations"],
                "reported_iter": r["reported_iter"], "reported": "last validation"}

    def artifacts(r: dict) -> dict:
        return {"per_class_csv": r["csv"], "validation_log": r["validation_log"], "work_dir": r["work_dir"]}

    out = []
    for r in runs:
        out.append(ProtocolResult(
            metrics=dict(r["metrics"]), dataset=cfg.dataset, split=split, seed=cfg.seed,
            variant={"lr": r["lr"]}, params=params(r), artifacts=artifacts(r)))
    best = best_of(runs)
    out.append(ProtocolResult(
        metrics=dict(best["metrics"]), dataset=cfg.dataset, split=split, seed=cfg.seed,
        variant={"lr": "best"},
        params={**params(best), "best_lr": best["lr"], "lrs": list(cfg.lrs), "lr_sweep": cfg.lr_sweep,
                "mIoU_by_lr": {f"{r['lr']:g}": r["metrics"].get("mIoU") for r in runs},
                # its files are the record of variant lr=<best_lr>'s: each artifact has one record
                "artifacts_in_variant": {"lr": best["lr"]}},
        artifacts={}))
    return out


class SegProtocolBase:
    """Mixin for the two mmseg protocols (``Protocol`` subclasses set HEAD and FROZEN)."""

    HEAD: str = "linear"
    FROZEN: bool = True
    HEADLINE_METRIC = "mIoU"
    NOT_IN_FINGERPRINT = EXECUTION_ONLY

    def head_spec(self) -> dict:
        """What the fingerprint records about the head and the backbone's training mode."""
        spec = {"head": self.HEAD, "frozen_backbone": self.FROZEN, "mmseg": MMSEG_VERSION}
        if self.HEAD == "mask":
            spec.update(mask_layers=MASK_LAYERS, mask_drop_path=MASK_DROP_PATH)
        return spec

    def fingerprint(self, extra: dict | None = None) -> str:
        return super().fingerprint({"head_spec": self.head_spec(), **(extra or {})})

    def default_work_dir(self, model, data_root: Path) -> Path:
        from harness.data.io import data_stamp
        from harness.paths import home

        # the data stamp too: mmengine resumes from this folder, never from another data set's run
        return (home() / "mmseg" / model.cache_key[:16]
                / f"{self.registry_name}-{self.fingerprint()}-{data_stamp(data_root)[:8]}")

    def precision(self) -> str:
        return "fp16" if self.cfg.amp else "fp32"  # mmengine's AmpOptimWrapper autocasts to fp16

    def run(self, model, data_root: Path) -> list:
        if model.context == "pixels":  # mmseg rebuilds a ViT from weights; pixels have none
            raise NotApplicable(f"{self.registry_name} finetunes a ViT through mmseg; the raw-pixel "
                                "baseline has no network to load")
        if model.device.type == "cpu" and torch.cuda.is_available():
            # mmengine's Runner puts the model on the GPU whenever one is visible
            raise ConfigError(f"{self.registry_name} runs through mmengine, which trains on the GPU when "
                              "torch sees one: run it with --device cuda, or hide the GPUs "
                              "(CUDA_VISIBLE_DEVICES='') to run it on the CPU")
        b = model.backbone
        state = b.backbone_state_dict() if hasattr(b, "backbone_state_dict") else b.state_dict()
        state = {k: v.detach().cpu() for k, v in state.items()}  # mmengine loads them from a file
        arch = dict(getattr(b, "arch_kwargs", {}) or {})
        arch.setdefault("num_heads", b.blocks[0].attn.num_heads)
        work_dir = Path(self.cfg.work_dir) if self.cfg.work_dir else self.default_work_dir(model, data_root)
        runs = run_seg_protocol(state, arch, self.cfg, data_root, work_dir, head=self.HEAD,
                                frozen=self.FROZEN)
        if int(os.environ.get("RANK", os.environ.get("SLURM_PROCID", "0"))) != 0:
            return []  # one set of records per run, written by rank 0
        return to_results(runs, self.cfg)


# ============================================================================ CPU smoke
def cpu_pretrained_checkpoint(method_config: str = "methods/dino_cpu.yaml", preset: str = "small") -> Path:
    """The default suite's CPU-pretrained checkpoint on SynthScenes (pretrained once, cached)."""
    from harness.data.synthetic import default_root, generate
    from harness.suite import ModelEntry, pretrained_checkpoint

    root = generate(default_root(preset, 0), preset=preset, seed=0, progress=False)
    name = Path(method_config).stem.split("_")[0]
    return pretrained_checkpoint(ModelEntry(name=name, pretrain=method_config), root,
                                 f"synthscenes-{preset}", progress=False)


def smoke(checkpoint: str | Path | None, layout: Literal["ade", "voc"] = "ade", *,
          protocol: str = "seg_linear", preset: str = "small", iters: int | None = None,
          lrs: list[float] | None = None, work_root: str | Path | None = None) -> float:
    """CPU check on SynthScenes: the protocol's ``synth`` preset on a checkpoint (or on
    the random-init ``vit_cpu_tiny`` when ``checkpoint`` is None); prints and returns the
    mIoU of the best lr."""
    from harness.data.synthetic import default_root, generate
    from harness.models import ModelHandle
    from harness.paths import home
    from harness.registry import PROTOCOLS

    root = generate(default_root(preset, 0), preset=preset, seed=0, progress=False)
    model = (ModelHandle.from_checkpoint(checkpoint) if checkpoint
             else ModelHandle.random_init("vit_cpu_tiny", seed=0))
    values: dict[str, Any] = {"dataset": f"synth_{layout}"}
    if iters is not None:
        values["iters"] = iters
    if lrs is not None:
        values["lrs"] = list(lrs)
    proto = PROTOCOLS.get(protocol).from_preset("synth", values)
    work = Path(work_root) if work_root else home() / "mmseg-smoke"
    proto.cfg.work_dir = str(work / model.cache_key[:16] / f"{protocol}-{proto.fingerprint()}")
    results = proto.run(model, root)
    best = next(r for r in results if r.variant.get("lr") == "best")
    print(f"[smoke] {protocol} on SynthScenes-{preset} ({layout} layout), "
          f"{'checkpoint ' + str(checkpoint) if checkpoint else 'random init'}: "
          f"mIoU {best.metrics['mIoU']:.2f} (lr {best.params['best_lr']:g}, {proto.cfg.iters} iters)")
    return float(best.metrics["mIoU"])
