"""Pretraining by configuration, cached: one method config on one data set gives one checkpoint
folder, keyed by everything that changes the weights, so an equal request finds its earlier
result (suites, the `pretrain` model source, launchers)."""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

from harness.config import apply_overrides, fingerprint, load_config, to_dict
from harness.data.io import data_stamp
from harness.paths import checkpoint_cache_dir
from harness.runtime.device import device_type


@dataclass
class PretrainRequest:
    """What to pretrain: a name, a method config file and overrides on it (a suite's ModelEntry
    has the same three fields)."""
    name: str
    pretrain: str
    set: list[str] = field(default_factory=list)


def pretrain_config(entry: PretrainRequest, data_root: Path, data_name: str, device: str = "auto"):
    """(validated pretraining config, its source file) of one pretraining entry."""
    from harness.training.engine import load_pretrain_config

    raw = apply_overrides(load_config(entry.pretrain), entry.set, origin=f"suite set of model {entry.name!r}:")
    source = raw.pop("_source_", entry.pretrain)
    raw["data"] = {"root": str(data_root), "name": data_name}
    raw.setdefault("train", {})["device"] = device
    return load_pretrain_config(raw, source), source


def checkpoint_plan(entry: PretrainRequest, data_root: Path, data_name: str, device: str = "auto"):
    """(config, source, output folder) of one pretraining entry; the folder is keyed by
    everything that changes the weights, so an equal configuration finds its earlier result."""
    cfg, source = pretrain_config(entry, data_root, data_name, device)
    key = to_dict(cfg)
    for k in ("num_workers", "loggers"):  # do not change the weights (the engine resumes across them)
        key["train"].pop(k, None)
    # a GPU's rounding gives other weights than the CPU's; which GPU of a kind does not matter
    key["train"]["device"] = device_type(device)  # from the spec: a login node may have no GPU
    key["data_stamp"] = data_stamp(data_root)  # a regenerated dataset at the same path is other data
    return cfg, source, checkpoint_cache_dir() / f"{entry.name}-{fingerprint(key)}"


def cached_checkpoint(entry: PretrainRequest, data_root: Path, data_name: str, device: str = "auto") -> Path | None:
    """The checkpoint an earlier run pretrained for this entry, if there is one."""
    ckpt = checkpoint_plan(entry, data_root, data_name, device)[2] / "backbone.safetensors"
    return ckpt if ckpt.is_file() else None


def pretrained_checkpoint(entry: PretrainRequest, data_root: Path, data_name: str, progress: bool = True,
                          log=print, device: str = "auto") -> Path:
    """Pretrain (or reuse the cached result of) one method configuration."""
    from harness.training.engine import pretrain

    cfg, source, out_dir = checkpoint_plan(entry, data_root, data_name, device)
    ckpt = out_dir / "backbone.safetensors"
    if ckpt.is_file():
        log(f"[{entry.name}] using cached checkpoint {ckpt}")
        return ckpt
    log(f"[{entry.name}] pretraining ({source}) -> {out_dir}")
    t0 = time.perf_counter()
    path = pretrain(cfg, out_dir, source, progress=progress)
    log(f"[{entry.name}] pretrained in {time.perf_counter() - t0:.0f} s")
    return path
