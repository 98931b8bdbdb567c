"""What ``seg_linear`` and ``segmenter`` share as protocols: the settings, the result
records and the protocol base. Both run through mmseg: benchmarks/mmseg_bridge.py builds the
mmengine config from these settings and runs it.

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

import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar, Literal

import torch

from benchmarks.mmseg_bridge import (
    MASK_DROP_PATH, MASK_LAYERS, MMSEG_VERSION, mmseg_layout, run_seg_protocol,
)
from harness.errors import ConfigError, NotApplicable

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
        spec = mmseg_layout(self.dataset)
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
        rw, rh = mmseg_layout(self.dataset).scale_ratio
        return (round(rw * self.crop_size), round(rh * self.crop_size))

    def train_crop(self) -> int:
        return round(mmseg_layout(self.dataset).train_crop_ratio * self.crop_size)

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
    from harness.protocol import ProtocolResult

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
    RUNS_ON_EVERY_RANK = True  # mmengine's launcher 'pytorch' trains on every torchrun process

    @classmethod
    def conformance_check(cls, model, exported: dict, data_root: Path) -> dict:
        """mmseg trains too long for the conformance suite: the exported backbone must pass
        the bridge's strict key map into mmseg's VisionTransformer."""
        from benchmarks.mmseg_bridge import convert_state_dict

        return {"mmseg_keys": len(convert_state_dict(exported))}

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
