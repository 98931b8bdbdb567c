"""GPU models as data (configs/gpus.yaml) and the GPU-hours estimate built on them.

Each model has a dense peak TFLOP/s per precision (vendor datasheet, no sparsity) and an
assumed model FLOP utilisation (MFU) per workload kind (``forward``: no backward pass;
``train``: forward + backward). Every figure is ``stated`` (with its source) or
``measured`` (with the command and date that measured it), so a reader of an estimate can
tell a datasheet number from a measurement.

    gpu = find_gpu("H100")
    seconds = gpu_seconds({"forward": 3.2e15}, gpu, "fp32")   # FLOPs / (peak x MFU)
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import yaml

from harness.config import CONFIG_ROOT
from harness.errors import ConfigError
from harness.yaml_io import load_yaml

GPUS_PATH = CONFIG_ROOT / "gpus.yaml"
PEAK_PRECISIONS = ("fp32", "tf32", "fp16", "bf16")
WORKLOADS = ("forward", "train")
DEFAULT_GPU = "H100"
# what every protocol runs at unless its settings say otherwise (the protocols' default
# `precision: fp32`; the mmseg protocols' `amp: false`)
DEFAULT_PRECISION = "fp32"


@dataclass(frozen=True)
class Figure:
    """One number and where it comes from."""

    value: float
    kind: str  # "stated" | "measured"
    source: str = ""  # stated: datasheet or assumption
    command: str = ""  # measured: the command that printed it
    date: str = ""  # measured: YYYY-MM-DD

    def provenance(self) -> str:
        if self.kind == "measured":
            return f"measured {self.date}: {self.command}"
        return f"stated: {self.source}"


@dataclass(frozen=True)
class Gpu:
    key: str
    name: str
    aliases: tuple[str, ...]
    peak_tflops: dict[str, Figure | None]  # precision -> dense peak; None: no such arithmetic
    mfu: dict[str, Figure]  # workload kind -> assumed / measured utilisation

    def peak(self, precision: str) -> Figure:
        if precision not in PEAK_PRECISIONS:
            raise ConfigError(f"precision must be one of {', '.join(PEAK_PRECISIONS)}; found {precision!r}")
        fig = self.peak_tflops.get(precision)
        if fig is None:
            have = [p for p in PEAK_PRECISIONS if self.peak_tflops.get(p) is not None]
            raise ConfigError(f"{self.name} has no {precision} arithmetic (configs/gpus.yaml); "
                              f"estimate with --precision {' or '.join(have)}")
        return fig

    def flops_per_second(self, precision: str, workload: str) -> float:
        """Sustained FLOP/s assumed for a workload: peak x MFU."""
        if workload not in self.mfu:
            raise ConfigError(f"workload must be one of {', '.join(WORKLOADS)}; found {workload!r}")
        return self.peak(precision).value * 1e12 * self.mfu[workload].value


def _norm(name: str) -> str:
    return re.sub(r"[\s_\-]+", "", name).lower()


def _figure(raw, where: str, lo: float = 0.0, hi: float = float("inf")) -> Figure:
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: expected {{value, kind: stated|measured, ...}}; found {raw!r}")
    unknown = sorted(set(raw) - {"value", "kind", "source", "command", "date"})
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {unknown}; a figure has value, kind, source "
                          f"(stated) or command and date (measured)")
    value, kind = raw.get("value"), raw.get("kind")
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not lo < value <= hi:
        raise ConfigError(f"{where}: value must be a number in ({lo:g}, {hi:g}]; found {value!r}")
    if kind == "stated":
        if not raw.get("source"):
            raise ConfigError(f"{where}: a stated figure needs its `source` (datasheet or assumption)")
    elif kind == "measured":
        if not raw.get("command") or not raw.get("date"):
            raise ConfigError(f"{where}: a measured figure needs the `command` that measured it and its `date`")
    else:
        raise ConfigError(f"{where}: kind must be 'stated' or 'measured'; found {kind!r}")
    return Figure(float(value), kind, str(raw.get("source", "")), str(raw.get("command", "")),
                  str(raw.get("date", "")))


def load_gpus(path: str | Path | None = None) -> dict[str, Gpu]:
    """All GPU models of a gpus.yaml (default configs/gpus.yaml), checked."""
    path = Path(path) if path is not None else GPUS_PATH
    try:
        raw = load_yaml(path.read_text()) or {}
    except OSError as exc:
        raise ConfigError(f"cannot read the GPU table {path}: {exc}") from exc
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from exc
    entries = raw.get("gpus")
    if not isinstance(entries, dict) or not entries:
        raise ConfigError(f"{path}: expected a `gpus:` mapping of GPU models")
    out = {}
    for key, e in entries.items():
        where = f"{path}: gpus.{key}"
        if not isinstance(e, dict):
            raise ConfigError(f"{where}: expected a mapping with name, peak_tflops, mfu")
        peaks_raw = e.get("peak_tflops") or {}
        bad = sorted(set(peaks_raw) - set(PEAK_PRECISIONS))
        if bad:
            raise ConfigError(f"{where}.peak_tflops: unknown precision(s) {bad}; known: {', '.join(PEAK_PRECISIONS)}")
        peaks = {p: (None if peaks_raw.get(p) is None else _figure(peaks_raw[p], f"{where}.peak_tflops.{p}"))
                 for p in PEAK_PRECISIONS}
        mfu_raw = e.get("mfu") or {}
        if set(mfu_raw) != set(WORKLOADS):
            raise ConfigError(f"{where}.mfu: expected exactly the workload kinds {', '.join(WORKLOADS)}; "
                              f"found {sorted(mfu_raw)}")
        mfu = {w: _figure(mfu_raw[w], f"{where}.mfu.{w}", hi=1.0) for w in WORKLOADS}
        out[key] = Gpu(key, str(e.get("name", key)), tuple(str(a) for a in e.get("aliases") or ()), peaks, mfu)
    seen: dict[str, str] = {}
    for g in out.values():
        for n in (g.key, *g.aliases):
            other = seen.setdefault(_norm(n), g.key)
            if other != g.key:
                raise ConfigError(f"{path}: the name {n!r} of {g.key} is also a name of {other}")
    return out


def find_gpu(name: str, path: str | Path | None = None) -> Gpu:
    """A GPU model by key or alias (case, spaces, '-' and '_' ignored)."""
    gpus = load_gpus(path)
    want = _norm(name)
    for g in gpus.values():
        if want in {_norm(n) for n in (g.key, *g.aliases)}:
            return g
    known = "; ".join(f"{g.key} ({g.name})" for g in gpus.values())
    raise ConfigError(f"unknown GPU {name!r}; known: {known}. Add a row to "
                      f"{Path(path) if path is not None else GPUS_PATH} for another model")


def gpu_seconds(flops_by_workload: dict[str, float], gpu: Gpu, precision: str) -> float:
    """GPU-seconds for FLOPs split by workload kind: sum of FLOPs / (peak x MFU)."""
    return sum(f / gpu.flops_per_second(precision, w) for w, f in flops_by_workload.items() if f)


@dataclass(frozen=True)
class GpuChoice:
    """The GPU, precision and GPU count a plan is estimated for."""

    gpu: Gpu
    precision: str = DEFAULT_PRECISION
    n_gpus: int = 1

    @classmethod
    def of(cls, gpu: str | Gpu = DEFAULT_GPU, precision: str | None = None, n_gpus: int = 1,
           path: str | Path | None = None) -> "GpuChoice":
        g = gpu if isinstance(gpu, Gpu) else find_gpu(gpu, path)
        precision = precision or DEFAULT_PRECISION
        g.peak(precision)  # unknown / unsupported precision fails here, before any planning
        if isinstance(n_gpus, bool) or not isinstance(n_gpus, int) or n_gpus < 1:
            raise ConfigError(f"the GPU count must be a whole number >= 1; found {n_gpus!r}")
        return cls(g, precision, n_gpus)

    def gpu_hours(self, flops_by_workload: dict[str, float] | None) -> float | None:
        if flops_by_workload is None:
            return None
        return gpu_seconds(flops_by_workload, self.gpu, self.precision) / 3600.0

    def wall_hours(self, gpu_hours: float | None) -> float | None:
        """Wall-clock hours on n_gpus, assuming perfect scaling (data parallel or separate runs)."""
        return None if gpu_hours is None else gpu_hours / self.n_gpus

    def describe(self) -> list[str]:
        peak = self.gpu.peak(self.precision)
        default = " (the protocols' default; --precision to change)" if self.precision == DEFAULT_PRECISION else ""
        lines = [f"GPU estimate: {self.gpu.name} [{self.gpu.key}], precision {self.precision}{default}, "
                 f"{self.n_gpus} GPU(s)",
                 f"  peak {peak.value:g} TFLOP/s dense ({peak.provenance()})"]
        lines += [f"  MFU {w} {self.gpu.mfu[w].value:.2f} ({self.gpu.mfu[w].provenance()})" for w in WORKLOADS]
        return lines


__all__ = ["GPUS_PATH", "PEAK_PRECISIONS", "WORKLOADS", "DEFAULT_GPU", "DEFAULT_PRECISION", "Figure", "Gpu",
           "load_gpus", "find_gpu", "gpu_seconds", "GpuChoice"]
