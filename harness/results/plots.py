"""The leaderboard's PNG figures: bars per protocol and curves over the training fraction.

Each figure is first a spec: the plain numbers and labels it shows. ``draw_once`` draws a spec
only when the figure's file does not already hold it: the folder's ``.figures.json`` keeps, per
file, the key of what was drawn (the spec, this module's source and matplotlib's version) and the
file's sha256, so a rerun over unchanged records rewrites no figure and imports no matplotlib,
while a changed number, a new model, an edited or deleted file, or other drawing code draws again.
"""
from __future__ import annotations

import hashlib
import json
import re
from collections import defaultdict
from fractions import Fraction
from importlib import metadata
from pathlib import Path
from typing import Any, Callable

import numpy as np

from harness.io_utils import atomic_write, atomic_write_json, sha256_file
from harness.metrics import Metric
from harness.protocol_info import declared_headline
from harness.results.run_table import RunTable, headline_keys
from harness.results.table import SHORT_FP
from harness.variants import fraction_value, variant_label

PLOT_MODELS = 10  # models a plot draws at most: matplotlib's ten default colours, none shared
STAMPS = ".figures.json"  # beside the figures: {file name: {"key": ..., "sha256": ...}}


def safe_name(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name).strip("_")


def axis_label(metric: Metric) -> str:
    """How an axis names a metric with its direction: "top1 (higher is better ↑)"."""
    return f"{metric.header} ({metric.direction} is better {metric.arrow})"


def plot_selection(t: RunTable, keys: list[tuple], limit: int = PLOT_MODELS) -> tuple[list[str], str]:
    """(models, note): the models with a number in ``keys``; past ``limit`` the ``limit`` with
    the best mean over the columns they have (the highest, the lowest where the metric is
    lower-is-better), in table order, and a note saying so."""
    models = t.rows_with(keys)
    if len(models) <= limit:
        return models, ""
    cols = [t.col[c] for c in keys]
    has = t.n[:, cols] > 0
    score = np.where(has, t.mean[:, cols], 0.0).sum(axis=1) / np.maximum(has.sum(axis=1), 1)
    sign = t.metric(keys[0]).sign()  # the columns of one plot share their metric
    ranked = sorted(models, key=lambda m: -sign * score[t.row[m]])[:limit]
    keep = set(ranked)
    return [m for m in models if m in keep], f"top {limit} of {len(models)} models by mean"


# ----------------------------------------------------------------------------- specs
def bar_spec(t: RunTable, protocol: str) -> dict[str, Any] | None:
    """What the bar chart of ``protocol``'s headline columns shows (None: no such column)."""
    keys = [c for c in headline_keys(t) if c[0] == protocol]
    if not keys:
        return None
    models, note = plot_selection(t, keys)
    cols = [t.col[c] for c in keys]
    return {"kind": "bars",
            "width": min(18, max(6, 1.2 * len(keys) * max(1, len(models)) * 0.35 + 3)),
            "xlabels": [t.labels[c].split(" | ", 1)[1] for c in keys],
            "ylabel": axis_label(t.metric(keys[0])), "title": protocol + (f" ({note})" if note else ""),
            "series": [{"label": m, "mean": t.mean[t.row[m], cols].tolist(), "std": t.std[t.row[m], cols].tolist()}
                       for m in models]}


def fraction_curve_specs(t: RunTable, protocol: str | None = None) -> list[tuple[str, dict[str, Any]]]:
    """(file name, spec) of each headline metric vs training fraction figure: one per (protocol,
    dataset, split, other variant values, metric, fingerprint) whose columns have a ``fraction``
    variant (dense NN's subsets); ``protocol``: only that protocol's."""
    groups: dict[tuple, list[tuple[float, tuple]]] = defaultdict(list)
    for c in t.keys:
        if protocol is not None and c[0] != protocol:
            continue
        if c[4].lower() != (declared_headline(c[0]) or c[4]).lower():
            continue
        var = dict(t.variants[c])
        frac = fraction_value(var.pop("fraction", None))
        if frac is None:
            continue
        groups[(c[0], c[1], c[2], variant_label(var), c[4], c[5])].append((frac, c))
    multi_fp = len({g[:5] for g in groups}) < len(groups)
    out = []
    for (proto, dataset, split, rest, metric, fp), pts in sorted(groups.items()):
        pts.sort()
        models, note = plot_selection(t, [c for _, c in pts])
        series = []
        for m in models:
            r = t.row[m]
            have = [(frac, t.col[c]) for frac, c in pts if t.n[r, t.col[c]] > 0]
            if have:
                series.append({"label": m, "x": [f for f, _ in have], "mean": [float(t.mean[r, j]) for _, j in have],
                               "std": [float(t.std[r, j]) for _, j in have]})
        ticks = [f for f, _ in pts]
        spec = {"kind": "fraction_curve", "series": series, "ylabel": axis_label(t.metric(pts[0][1])), "ticks": ticks,
                "ticklabels": [str(Fraction(x).limit_denominator(1024)) for x in ticks],
                "title": " ".join(x for x in (proto, f"{dataset}/{split}", rest, f"@{fp[:SHORT_FP]}",
                                              f"({note})" if note else "") if x)}
        name = f"{proto}_{dataset}_{split}" + (f"_{rest}" if rest else "") + \
               (f"_{fp[:SHORT_FP]}" if multi_fp else "") + "_fraction.png"
        out.append((safe_name(name), spec))
    return out


# ----------------------------------------------------------------------------- drawing
def _pyplot():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def _outside_legend(ax) -> None:
    """The legend right of the axes, never over the data (savefig's bbox_inches='tight' keeps it)."""
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0, frameon=False)


def _save(fig, path: Path) -> None:
    plt = _pyplot()
    _outside_legend(fig.axes[0])
    fig.tight_layout()
    atomic_write(path, lambda p: fig.savefig(p, format="png", dpi=110, bbox_inches="tight"))
    plt.close(fig)


def draw_bars(spec: dict[str, Any], path: Path) -> None:
    plt = _pyplot()
    series = spec["series"]
    fig, ax = plt.subplots(figsize=(spec["width"], 4.5))
    width = 0.8 / max(1, len(series))
    x = np.arange(len(spec["xlabels"]))
    for i, s in enumerate(series):
        ax.bar(x + (i - (len(series) - 1) / 2) * width, s["mean"], width, yerr=s["std"], capsize=2, label=s["label"])
    ax.set_xticks(x)
    ax.set_xticklabels(spec["xlabels"], rotation=20, ha="right", fontsize=8)
    ax.set_ylabel(spec["ylabel"])
    ax.set_title(spec["title"])
    _save(fig, path)


def draw_fraction_curve(spec: dict[str, Any], path: Path) -> None:
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6, 4.2))
    for s in spec["series"]:
        ax.errorbar(s["x"], s["mean"], yerr=s["std"], marker="o", capsize=2, label=s["label"])
    ax.set_xscale("log")
    ax.set_xlabel("training fraction")
    ax.set_ylabel(spec["ylabel"])
    ax.set_xticks(spec["ticks"])
    ax.set_xticklabels(spec["ticklabels"])
    ax.minorticks_off()
    ax.set_title(spec["title"])
    _save(fig, path)


DRAWERS: dict[str, Callable[[dict, Path], None]] = {"bars": draw_bars, "fraction_curve": draw_fraction_curve}


# ----------------------------------------------------------------------------- draw once
def figure_key(spec: dict[str, Any]) -> str:
    """What a drawn file depends on: the spec, the code that draws it and matplotlib's version."""
    try:
        mpl = metadata.version("matplotlib")
    except metadata.PackageNotFoundError:
        mpl = "absent"
    code = hashlib.sha256(Path(__file__).read_bytes()).hexdigest()
    blob = json.dumps({"spec": spec, "code": code, "matplotlib": mpl}, sort_keys=True, allow_nan=True)
    return hashlib.sha256(blob.encode()).hexdigest()


def _read_stamps(folder: Path) -> dict[str, dict]:
    try:
        stamps = json.loads((folder / STAMPS).read_text())
    except (OSError, ValueError):
        return {}
    return stamps if isinstance(stamps, dict) else {}


def draw_once(figures: list[tuple[Path, dict[str, Any]]]) -> list[Path]:
    """Draw each (path, spec) whose file does not hold that spec yet (see the module's text);
    returns the paths, in order."""
    by_folder: dict[Path, dict[str, dict]] = {}
    changed: set[Path] = set()
    for path, spec in figures:
        stamps = by_folder.setdefault(path.parent, _read_stamps(path.parent))
        key = figure_key(spec)
        known = stamps.get(path.name)
        if isinstance(known, dict) and known.get("key") == key and path.is_file() \
                and known.get("sha256") == sha256_file(path):
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        DRAWERS[spec["kind"]](spec, path)
        stamps[path.name] = {"key": key, "sha256": sha256_file(path)}
        changed.add(path.parent)
    for folder in changed:
        atomic_write_json(folder / STAMPS, by_folder[folder])
    return [path for path, _ in figures]
