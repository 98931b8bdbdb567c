"""One typed table per run: the leaderboard's numbers as arrays, built once from
harness.results.leaderboard.build_leaderboard's frame and read by every view of the run (console,
CSV, Markdown, HTML, plots, the report).

Rows are models, columns the leaderboard's column keys (protocol, dataset, split, variant,
metric, fingerprint); ``mean``, ``std``, ``n`` and the 95% interval (``ci_low``, ``ci_high``)
are (rows x columns) numpy arrays, so a view reads a cell by index, never by a pandas label
look-up. Each column's variant is parsed once (``variants``).

The interval of a cell over several seeds is Student's t over the seeds; of a one-seed cell
whose record keeps per-image statistics, a seeded bootstrap over the evaluation images
(harness.results.bootstrap), computed the first time an interval is read; other one-seed cells
have none (``ci_method``).
"""
from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np
import pandas as pd

from harness.metrics import Metric
from harness.protocol_info import headline_metric, metric_of
from harness.results import bootstrap
from harness.results.table import column_label
from harness.variants import parse_variant

# Quantiles of Student's t distribution, 0.975, by degrees of freedom (n - 1): the two-sided
# 95% interval of a mean over n seeds is mean ± t * std / sqrt(n). Tabulated to 30 degrees of
# freedom (scipy.stats.t.ppf, 9 decimals); past 30 the Cornish-Fisher expansion of t around the
# normal quantile (Abramowitz & Stegun 26.7.5) is within 3e-8 of it, without importing scipy.
T975 = {1: 12.706204736, 2: 4.302652730, 3: 3.182446305, 4: 2.776445105, 5: 2.570581836,
        6: 2.446911851, 7: 2.364624252, 8: 2.306004135, 9: 2.262157163, 10: 2.228138852,
        11: 2.200985160, 12: 2.178812830, 13: 2.160368656, 14: 2.144786688, 15: 2.131449546,
        16: 2.119905299, 17: 2.109815578, 18: 2.100922040, 19: 2.093024054, 20: 2.085963447,
        21: 2.079613845, 22: 2.073873068, 23: 2.068657610, 24: 2.063898562, 25: 2.059538553,
        26: 2.055529439, 27: 2.051830516, 28: 2.048407142, 29: 2.045229642, 30: 2.042272456}
Z975 = 1.959963985
CI_SEEDS = "t over seeds"  # how a cell's interval was made (the leaderboard's ci_method column)
CI_NONE = "none: one seed"  # n = 1 without per-image statistics: no interval (nothing measured its spread)
CI_COMPUTED = "none: computed, not measured"  # the chance row: what a uniform guess scores, no sample behind it


def t975(dof: int) -> float:
    if dof < 1:
        return math.nan
    if dof in T975:
        return T975[dof]
    z, v = Z975, float(dof)
    return (z + (z**3 + z) / (4 * v) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * v**2)
            + (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / (384 * v**3)
            + (79 * z**9 + 776 * z**7 + 1482 * z**5 - 1920 * z**3 - 945 * z) / (92160 * v**4))


class CellStats(dict):
    """(model, *column key) -> (record id, per-image block) of a leaderboard's one-seed cells, kept
    in the frame's ``attrs``: read-only and shared, so pandas' copies of ``attrs`` (a deep copy on
    every operation on the frame) do not copy the statistics."""

    def __deepcopy__(self, memo) -> "CellStats":
        return self


@dataclass
class RunTable:
    """The leaderboard of one run as arrays (see the module's text). Build it with
    :func:`run_table`; ``frame`` is the pandas table it was made from."""

    frame: pd.DataFrame
    models: list[str]
    keys: list[tuple]
    mean: np.ndarray
    std: np.ndarray
    n: np.ndarray  # int; 0 where a model has no number in the column
    model_info: dict[str, dict[str, Any]]
    messages: list[str]
    conflicts: list[dict]
    # (model, *column key) -> (record id, per-image block) of one-seed cells (build_leaderboard)
    per_image: dict[tuple, tuple[str, Any]] = field(default_factory=dict)
    row: dict[str, int] = field(init=False)
    col: dict[tuple, int] = field(init=False)

    def __post_init__(self) -> None:
        self.row = {m: i for i, m in enumerate(self.models)}
        self.col = {c: j for j, c in enumerate(self.keys)}

    def __len__(self) -> int:
        return len(self.models)

    @property
    def empty(self) -> bool:
        return not self.models

    # ------------------------------------------------------------------ cells
    def cell(self, model: str, key: tuple) -> tuple[float, float, int]:
        i, j = self.row[model], self.col[key]
        return float(self.mean[i, j]), float(self.std[i, j]), int(self.n[i, j])

    def has(self, model: str, key: tuple) -> bool:
        return self.n[self.row[model], self.col[key]] > 0

    def rows_with(self, keys: list[tuple]) -> list[str]:
        """The models with a number in any of ``keys``, in table order."""
        if not keys:
            return []
        cols = [self.col[c] for c in keys]
        hit = (self.n[:, cols] > 0).any(axis=1)
        return [m for m, h in zip(self.models, hit) if h]

    @cached_property
    def ci_half(self) -> np.ndarray:
        """Half width of each cell's 95% interval over seeds (t distribution); NaN for n <= 1."""
        dof = self.n - 1
        t = np.vectorize(t975, otypes=[float])(dof) if dof.size else np.zeros(dof.shape)
        with np.errstate(invalid="ignore", divide="ignore"):
            half = t * self.std / np.sqrt(np.where(self.n > 0, self.n, np.nan))
        return np.where(self.n > 1, half, np.nan)

    @cached_property
    def bootstrapped(self) -> dict[tuple[int, int], bootstrap.BootstrapInterval]:
        """(row, column) -> the bootstrap interval of each one-seed cell whose record keeps
        per-image statistics; each record's statistics are read once for all its metrics."""
        by_record: dict[str, list[tuple[int, int, str]]] = {}
        blocks: dict[str, Any] = {}
        for (model, *key), (rid, block) in self.per_image.items():
            i, j = self.row.get(model), self.col.get(tuple(key))
            if i is None or j is None or self.n[i, j] != 1:
                continue
            by_record.setdefault(rid, []).append((i, j, key[4]))
            blocks[rid] = block
        out = {}
        for rid, cells in by_record.items():
            found = bootstrap.record_intervals(rid, blocks[rid], list(dict.fromkeys(c[2] for c in cells)))
            out.update({(i, j): found[metric] for i, j, metric in cells if metric in found})
        return out

    def _bounds(self, side: int) -> np.ndarray:
        bounds = self.mean + side * self.ci_half
        for (i, j), ci in self.bootstrapped.items():
            bounds[i, j] = ci.high if side > 0 else ci.low
        return bounds

    @cached_property
    def ci_low(self) -> np.ndarray:
        return self._bounds(-1)

    @cached_property
    def ci_high(self) -> np.ndarray:
        return self._bounds(+1)

    @cached_property
    def has_ci(self) -> np.ndarray:
        """Where a cell has a 95% interval (over seeds, or bootstrapped over images)."""
        return ~np.isnan(self.ci_low)

    def ci_method(self, model: str, key: tuple) -> str:
        i, j = self.row[model], self.col[key]
        if self.n[i, j] > 1:
            return CI_SEEDS
        found = self.bootstrapped.get((i, j))
        if found is not None:
            return found.method
        return CI_COMPUTED if self.context.get(model) == "chance" else CI_NONE

    def tied_with_best(self, key: tuple, rows: list[str]) -> set[str]:
        """Rows (among ``rows``) that the column's best mean (the lowest where lower is better)
        cannot be told apart from: both have a 95% interval (over seeds, or bootstrapped over
        images for one seed) and the two intervals overlap. The best row itself is not included."""
        j = self.col[key]
        measured = [m for m in rows if self.n[self.row[m], j] > 0]
        if len(measured) < 2:
            return set()
        # the best by the metric's direction: the lowest mean of a lower-is-better metric
        best = measured[self.metric(key).best_index([self.mean[self.row[m], j] for m in measured])]
        b = self.row[best]
        if not self.has_ci[b, j]:
            return set()
        lo_b, hi_b = self.ci_low[b, j], self.ci_high[b, j]
        out = set()
        for m in measured:
            i = self.row[m]
            if m == best or not self.has_ci[i, j] or math.isclose(self.mean[i, j], self.mean[b, j], abs_tol=1e-9):
                continue
            if self.ci_high[i, j] >= lo_b and self.ci_low[i, j] <= hi_b:
                out.add(m)
        return out

    # ------------------------------------------------------------------ columns
    def metric(self, key: tuple) -> Metric:
        """What a column's metric is (its direction above all), as its protocol declares it."""
        return metric_of(key[0], key[4])

    @cached_property
    def variants(self) -> dict[tuple, dict[str, str]]:
        """Each column's variant, parsed once."""
        return {c: parse_variant(c[3]) for c in self.keys}

    @cached_property
    def conflicted(self) -> set[tuple]:
        """Column keys (without fingerprint) that exist under several fingerprints."""
        count: dict[tuple, int] = {}
        for c in self.keys:
            count[c[:5]] = count.get(c[:5], 0) + 1
        return {k for k, v in count.items() if v > 1}

    @cached_property
    def labels(self) -> dict[tuple, str]:
        """Column key -> label; the short fingerprint where needed to tell columns apart, and
        the arrow after a lower-is-better metric ("rmse ↓"; a higher-is-better one has none)."""
        return {c: column_label(c if self.metric(c).higher_is_better else c[:4] + (f"{c[4]} ↓",) + c[5:],
                                with_fp=c[:5] in self.conflicted) for c in self.keys}

    @cached_property
    def context(self) -> dict[str, str | None]:
        """Model -> its context kind (harness.context), None for a method's model."""
        return {m: (self.model_info.get(m) or {}).get("context") for m in self.models}


def run_table(df: pd.DataFrame | RunTable) -> RunTable:
    """The RunTable of a build_leaderboard frame (a RunTable is returned as it is)."""
    if isinstance(df, RunTable):
        return df
    keys: list[tuple] = []
    seen = set()
    for c in df.columns:
        if c[:6] not in seen:
            seen.add(c[:6])
            keys.append(tuple(c[:6]))
    models = [str(m) for m in df.index]

    def stat(name: str) -> np.ndarray:
        if not keys:
            return np.zeros((len(models), 0))
        cols = pd.MultiIndex.from_tuples([c + (name,) for c in keys])
        return df.reindex(columns=cols).to_numpy(dtype=float, na_value=np.nan)

    counts = stat("n")
    n = np.where(np.isnan(counts), 0, counts).astype(int)
    return RunTable(frame=df, models=models, keys=keys, mean=stat("mean"), std=stat("std"), n=n,
                    model_info=dict(df.attrs.get("models", {})), messages=list(df.attrs.get("messages") or []),
                    conflicts=list(df.attrs.get("conflicts") or []), per_image=dict(df.attrs.get("per_image") or {}))


def headline_keys(t: RunTable) -> list[tuple]:
    """The columns of each (protocol, dataset, split, variant, fingerprint)'s headline metric."""
    by_group: dict[tuple, list[str]] = defaultdict(list)
    for c in t.keys:
        by_group[(c[0], c[1], c[2], c[3], c[5])].append(c[4])
    return [c for c in t.keys if c[4] == headline_metric(c[0], by_group[(c[0], c[1], c[2], c[3], c[5])])]


__all__ = ["RunTable", "CellStats", "run_table", "headline_keys", "t975", "CI_SEEDS", "CI_NONE", "CI_COMPUTED"]

