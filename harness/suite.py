"""A suite = models x protocols, from YAML. The default suite is what
``python run_benchmark.py`` runs: generate SynthScenes (cached), pretrain every listed
method briefly (checkpoints cached by configuration), evaluate every protocol, and
write the leaderboard."""
from __future__ import annotations

import dataclasses
import importlib.util
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.config import apply_overrides, fingerprint, from_dict, load_config, to_dict
from harness.data.io import data_stamp
from harness.errors import ConfigError, SslBenchError
from harness.evaluate import build_protocol, evaluate
from harness.models import ModelHandle
from harness.paths import checkpoint_cache_dir, results_dir


@dataclass
class SynthSpec:
    preset: str = "small"
    seed: int = 0
    root: str | None = None  # default: the cache location for (preset, seed)


@dataclass
class ModelEntry:
    name: str
    random_init: dict[str, Any] | None = None  # {arch, seed}
    pretrain: str | None = None  # a method config file (configs/methods/...)
    set: list[str] = field(default_factory=list)  # overrides for the pretraining config
    checkpoint: str | None = None  # an existing harness checkpoint


@dataclass
class ProtocolEntry:
    name: str
    dataset: str
    data_root: str = "{synth}"
    preset: str | None = None
    set: dict[str, Any] = field(default_factory=dict)
    requires: list[str] = field(default_factory=list)  # importable modules; skipped if absent


@dataclass
class SuiteConfig:
    synth: SynthSpec | None = None
    pretrain_data: str = "{synth}"
    pretrain_overrides: list[str] = field(default_factory=list)  # applied to every pretrained model
    models: list[ModelEntry] = field(default_factory=list)
    protocols: list[ProtocolEntry] = field(default_factory=list)


def load_suite(path: str | Path, overrides: list[str] | None = None) -> tuple[SuiteConfig, str]:
    raw = apply_overrides(load_config(path), overrides)
    source = raw.get("_source_", str(path))
    return from_dict(SuiteConfig, raw, source), source


def _importable(module: str) -> bool:
    try:  # a dotted name imports its parent, which may itself be missing
        return importlib.util.find_spec(module) is not None
    except ImportError:
        return False


def _fill(template: str, synth_root: Path | None) -> str:
    if "{synth}" in template:
        if synth_root is None:
            raise ConfigError(f"{template!r} refers to {{synth}} but the suite has no synth section")
        return template.replace("{synth}", str(synth_root))
    return template


def model_entries(suite: SuiteConfig) -> list[ModelEntry]:
    """The suite's models, each pretraining entry with the suite-wide overrides first."""
    if not suite.pretrain_overrides:
        return list(suite.models)
    return [dataclasses.replace(e, set=list(suite.pretrain_overrides) + list(e.set)) if e.pretrain else e
            for e in suite.models]


def pretrain_config(entry: ModelEntry, data_root: Path, data_name: str):
    """(validated pretraining config, its source file) of one pretraining entry."""
    from harness.engine import load_pretrain_config

    raw = apply_overrides(load_config(entry.pretrain), entry.set, origin=f"suite set of model {entry.name!r}:")
    source = raw.pop("_source_", entry.pretrain)
    raw["data"] = {"root": str(data_root), "name": data_name}
    return load_pretrain_config(raw, source), source


def suite_protocol(entry: ProtocolEntry, source: str):
    """The protocol object of one suite entry (its preset, its dataset and settings)."""
    return build_protocol(entry.name, entry.preset, {"dataset": entry.dataset, **entry.set}, source)


def pretrained_checkpoint(entry: ModelEntry, data_root: Path, data_name: str, progress: bool = True,
                          log=print) -> Path:
    """Pretrain (or reuse the cached result of) one method configuration."""
    from harness.engine import pretrain

    cfg, source = pretrain_config(entry, data_root, data_name)
    key = to_dict(cfg)
    key["train"].pop("num_workers", None)  # does not change the weights (the engine resumes across it)
    key["data_stamp"] = data_stamp(data_root)  # a regenerated dataset at the same path is other data
    out_dir = checkpoint_cache_dir() / f"{entry.name}-{fingerprint(key)}"
    ckpt = out_dir / "backbone.safetensors"
    if ckpt.is_file():
        log(f"[{entry.name}] using cached checkpoint {ckpt}")
        return ckpt
    log(f"[{entry.name}] pretraining ({source}) -> {out_dir}")
    t0 = time.perf_counter()
    path = pretrain(cfg, out_dir, source, progress=progress)
    log(f"[{entry.name}] pretrained in {time.perf_counter() - t0:.0f} s")
    return path


def model_handle(entry: ModelEntry, data_root: Path | None, data_name: str, progress: bool, log) -> ModelHandle:
    chosen = [k for k in ("random_init", "pretrain", "checkpoint") if getattr(entry, k)]
    if len(chosen) != 1:
        raise ConfigError(f"model {entry.name!r} needs exactly one of random_init / pretrain / "
                          f"checkpoint, found {chosen or 'none'}")
    if entry.random_init is not None:
        spec = dict(entry.random_init)
        arch = spec.pop("arch", "vit_cpu_tiny")
        return ModelHandle.random_init(arch, seed=int(spec.pop("seed", 0)), name=entry.name, **spec)
    if entry.checkpoint:
        return ModelHandle.from_checkpoint(entry.checkpoint, name=entry.name)
    if data_root is None:
        raise ConfigError(f"model {entry.name!r} needs pretraining data (suite pretrain_data)")
    return ModelHandle.from_checkpoint(pretrained_checkpoint(entry, data_root, data_name, progress, log),
                                       name=entry.name)


def run_suite(suite: SuiteConfig, source: str, *, force: bool = False, progress: bool = True,
              out_dir: Path | None = None, log=print) -> dict[str, Any]:
    from harness.leaderboard import build_leaderboard, format_console, write_leaderboard

    t0 = time.perf_counter()
    synth_root = None
    if suite.synth is not None:
        from harness.data.synthetic import default_root, generate

        synth_root = Path(suite.synth.root) if suite.synth.root else default_root(suite.synth.preset,
                                                                                   suite.synth.seed)
        log(f"SynthScenes ({suite.synth.preset}, seed {suite.synth.seed}) at {synth_root}")
        generate(synth_root, preset=suite.synth.preset, seed=suite.synth.seed, progress=progress)
    pre_root = Path(_fill(suite.pretrain_data, synth_root)) if suite.pretrain_data else None
    pre_name = f"synthscenes-{suite.synth.preset}" if suite.synth and "{synth}" in suite.pretrain_data \
        else str(pre_root)

    failures: list[str] = []
    records: list[dict] = []
    models = []
    for entry in model_entries(suite):
        try:
            models.append(model_handle(entry, pre_root, pre_name, progress, log))
        except SslBenchError:
            raise
        except Exception as exc:  # keep the rest of the suite going; report at the end
            failures.append(f"model {entry.name}: {exc}")
            log(traceback.format_exc())
    for p in suite.protocols:
        missing = [m for m in p.requires if not _importable(m)]
        if missing:
            log(f"skipping protocol {p.name}: needs {', '.join(missing)} "
                "(install with: bash scripts/install_mmcv.sh)")
            continue
        protocol = suite_protocol(p, source)
        data_root = Path(_fill(p.data_root, synth_root))
        for model in models:
            t1 = time.perf_counter()
            try:
                recs, skipped = evaluate(model, protocol, data_root, preset=p.preset, force=force)
            except SslBenchError:
                raise
            except Exception as exc:
                failures.append(f"{p.name} on {model.name}: {exc}")
                log(traceback.format_exc())
                continue
            records += recs
            state = "cached" if skipped else f"{time.perf_counter() - t1:.0f} s"
            log(f"[{p.name}/{p.preset or '-'}] {model.name}: {len(recs)} record(s) ({state})")
    out = Path(out_dir or results_dir())
    df = build_leaderboard(records)
    paths = write_leaderboard(df, out) if len(df) else {}
    log("")
    log(format_console(df) if len(df) else "(no results)")
    log("")
    for kind, path in paths.items():
        log(f"{kind:>12}: {path}")
    log(f"total time {time.perf_counter() - t0:.0f} s; records in {out / 'runs'}")
    if failures:
        log("FAILED parts:\n  " + "\n  ".join(failures))
    return {"records": records, "paths": paths, "failures": failures}
