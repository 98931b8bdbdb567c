"""One typed table per run: the leaderboard's numbers as arrays, built once from the records'
number rows and read by every view of the run (console, CSV, Markdown, HTML, plots, the report).

One path from records to the table: a records folder's index keeps one row per number
(harness.results.index.record_numbers; records given as dicts are turned into the same rows by
that function, as harness.results.table.flatten_records turns them, a load_results() frame's columns by
harness.results.table.numbers_of_frame, each in the order of the records' files), and
:func:`table_of_numbers` groups them into cells with one group-by. Rows are models, columns the
column keys (protocol, dataset, split, variant, metric, fingerprint); ``mean``, ``std``, ``n``
and the 95% interval (``ci_low``, ``ci_high``) are (rows x columns) numpy arrays, so a view reads
a cell by index, never by a pandas label look-up. Each column's variant is parsed once
(``variants``); ``frame`` is the same numbers as a pandas table (columns ``LEVELS``), for the
Python API.

The interval of a cell over several seeds is Student's t over the seeds; of a one-seed cell
whose record keeps per-image statistics, a seeded bootstrap over the evaluation images
(harness.results.bootstrap), computed the first time an interval is read and, for a records
folder, kept beside its index; other one-seed cells have none (``ci_method``).
"""
from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any, Callable, Iterable

import numpy as np
import pandas as pd

from harness.metrics import Metric
from harness.protocol_info import headline_metric, metric_of
from harness.results import bootstrap, kept_table
from harness.results.index import index_of, is_record, model_reading, record_numbers
from harness.results.pair_status import frame_parts, parts_of, undefined_parts
from harness.results.table import (column_label, conflict_message, disambiguate_data, disambiguate_models,
                                   file_order, fingerprint_conflicts, frame_in_file_order,
                                   group_ids, numbers_frame, numbers_of_frame)
from harness.variants import fraction_value, parse_variant

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


@dataclass
class RunTable:
    """The leaderboard of one run as arrays (see the module's text). Build it with
    :func:`table_of_numbers` (or harness.results.leaderboard.build_leaderboard)."""

    models: list[str]
    keys: list[tuple]
    mean: np.ndarray
    std: np.ndarray
    n: np.ndarray  # int; 0 where a model has no number in the column
    model_info: dict[str, dict[str, Any]]
    messages: list[str]
    conflicts: list[dict]
    # (row, column) -> (record id, record file) of the one-seed cells whose record keeps
    # per-image statistics; ``source`` tells where their blocks and kept intervals are
    per_image: dict[tuple[int, int], tuple[str, str]] = field(default_factory=dict)
    source: bootstrap.PerImageSource = field(default_factory=bootstrap.PerImageSource)
    # the records' parts without a number (null metrics, flags) as harness.results.pair_status
    # PairStatus rows: why a cell is empty or says little, where a run's pairs.json does not say it
    no_number: list = field(default_factory=list)
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
        per-image statistics; each record's are computed once for all its metrics, and kept
        beside a records folder's index (harness.results.bootstrap.kept_intervals)."""
        if "intervals" in self.__dict__:  # a kept table's, read as arrays: the dict only when asked
            cells, bounds, how = self.intervals
            return {(i, j): bootstrap.BootstrapInterval(low, high, images, resamples, seed) for (i, j), (low, high),
                    (images, resamples, seed) in zip(cells.tolist(), bounds.tolist(), how.tolist())}
        wanted: dict[str, tuple[str, list[str]]] = {}
        for (i, j), (rid, file) in self.per_image.items():
            metrics = wanted.setdefault(rid, (file, []))[1]
            if self.keys[j][4] not in metrics:
                metrics.append(self.keys[j][4])
        found = bootstrap.kept_intervals(self.source, wanted)
        return {(i, j): found[(rid, self.keys[j][4])] for (i, j), (rid, _) in self.per_image.items()
                if (rid, self.keys[j][4]) in found}

    @cached_property
    def intervals(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """:attr:`bootstrapped` as arrays, in its order: (k, 2) cells (row, column), (k, 2) bounds
        (low, high), (k, 3) how (images, resamples, seed); a kept table sets them as read."""
        found = self.bootstrapped
        cells = np.array(list(found), dtype=np.int64).reshape(-1, 2)
        bounds = np.array([(ci.low, ci.high) for ci in found.values()], dtype=float).reshape(-1, 2)
        how = np.array([(ci.images, ci.resamples, ci.seed) for ci in found.values()], dtype=np.int64).reshape(-1, 3)
        return cells, bounds, how

    @cached_property
    def _bootstrapped_cells(self) -> tuple[tuple[np.ndarray, np.ndarray], np.ndarray, np.ndarray]:
        """:attr:`intervals` as (rows, columns), lows, highs."""
        cells, bounds, _ = self.intervals
        return (cells[:, 0], cells[:, 1]), bounds[:, 0], bounds[:, 1]

    def _bounds(self, side: int) -> np.ndarray:
        bounds = self.mean + side * self.ci_half
        cells, lows, highs = self._bootstrapped_cells
        bounds[cells] = highs if side > 0 else lows
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

    @cached_property
    def ci_methods(self) -> np.ndarray:
        """(rows x columns) of :meth:`ci_method`, for every cell at once."""
        chance = np.array([self.context.get(m) == "chance" for m in self.models], dtype=bool)[:, None]
        out = np.where(self.n > 1, CI_SEEDS, np.where(chance, CI_COMPUTED, CI_NONE)).astype(object)
        cells, _, how = self.intervals
        one_seed = self.n[cells[:, 0], cells[:, 1]] == 1 if len(cells) else np.zeros(0, dtype=bool)
        if one_seed.any():
            said, which = np.unique(how[one_seed], axis=0, return_inverse=True)
            texts = np.array([bootstrap.BootstrapInterval(0.0, 0.0, *map(int, h)).method for h in said], dtype=object)
            out[cells[one_seed, 0], cells[one_seed, 1]] = texts[which.reshape(-1)]
        return out

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
    def baselines(self) -> dict[str, list[str]]:
        """Row -> the random-init rows its deltas are taken against (their mean). A random-init
        row is one whose records say so (context ``random_init``, harness.context); only rows of
        a method's or an imported checkpoint's model (no context) get them: every random-init row
        of their architecture (several init seeds show the baseline's own noise), else the only
        one there is. The other context rows (chance, pixels, supervised) are references too.
        Shared by every view of the table: read it, do not change it."""
        refs = [m for m in self.models if self.context[m] == "random_init"]
        arch_of = {m: (self.model_info.get(m) or {}).get("arch") for m in self.models}
        by_arch: dict[Any, list[str]] = {}
        for r in refs:  # one shared list per architecture: rows of one architecture share it
            by_arch.setdefault(arch_of[r], []).append(r)
        out = {}
        for m in self.models:
            if self.context[m] is not None or not refs:
                continue
            chosen = by_arch.get(arch_of[m]) or (refs if len(refs) == 1 else [])
            if chosen:
                out[m] = chosen
        return out

    @cached_property
    def baseline_mean(self) -> np.ndarray:
        """(rows x columns): the mean of each row's random-init rows (:attr:`baselines`) that
        have a number in the column; NaN where it has none. Computed once per distinct set
        of random-init rows, so a delta is a look-up, not a scan of the rows per cell."""
        out = np.full(self.mean.shape, np.nan)
        by_refs: dict[tuple[str, ...], list[int]] = {}
        for m, refs in self.baselines.items():
            by_refs.setdefault(tuple(refs), []).append(self.row[m])
        for refs, rows in by_refs.items():
            idx = [self.row[r] for r in refs]
            has = self.n[idx] > 0
            total = np.where(has, self.mean[idx], 0.0).sum(axis=0)
            count = has.sum(axis=0)
            with np.errstate(invalid="ignore", divide="ignore"):
                out[rows] = np.where(count > 0, total / np.maximum(count, 1), np.nan)
        return out

    @cached_property
    def frame(self) -> pd.DataFrame:
        """The table as pandas: index = model, columns ``LEVELS`` (stat = mean / std / n)."""
        cols = pd.MultiIndex.from_tuples([c + (s,) for c in self.keys for s in STATS], names=LEVELS)
        data = np.empty((len(self.models), len(cols)))
        data[:, 0::3], data[:, 1::3] = self.mean, self.std
        data[:, 2::3] = np.where(self.n > 0, self.n, np.nan)  # no number: NaN, as mean and std
        return pd.DataFrame(data, index=pd.Index(self.models, name="model"), columns=cols)

    @property
    def readings(self) -> dict[str, str]:
        """Row -> how its model was read (harness.results.index.model_reading of the record of
        its oldest number), where known."""
        return {m: info["reading"] for m, info in self.model_info.items() if info and info.get("reading")}

    @cached_property
    def context(self) -> dict[str, str | None]:
        """Model -> its context kind (harness.context), None for a method's model."""
        return {m: (self.model_info.get(m) or {}).get("context") for m in self.models}


COL_KEYS = ["protocol", "dataset", "split", "variant", "metric", "fingerprint"]
# Column levels of ``RunTable.frame``.
LEVELS = ("protocol", "dataset", "split", "variant", "metric", "fingerprint", "stat")
STATS = ("mean", "std", "n")


def column_sort_key(col: tuple) -> tuple:
    """Table order: protocol, dataset, split, then variant values numerically (fraction
    1/128 < 1/8 < 1), metric, fingerprint."""
    var = []
    for k, v in parse_variant(col[3]).items():
        num = fraction_value(v)
        var.append((k, 0 if num is not None else 1, num if num is not None else 0.0, v))
    return (col[0], col[1], col[2], tuple(var), col[4], col[5])


# (record ids, files) of each row's oldest number -> how each of their models was read
Readings = Callable[[list[str], list[str]], list[str | None]]


def table_of_numbers(flat: pd.DataFrame, source: bootstrap.PerImageSource | None = None,
                     readings: Readings | None = None) -> RunTable:
    """The RunTable of number rows (harness.results.table.FLAT_COLUMNS) in one group-by: two
    checkpoints under one name become ``name@sha8`` rows, one dataset on several data sets
    ``dataset@data8`` columns, a column under several fingerprints a message; of a re-run of the
    same (model, column, seed) the newest number counts; a cell is the mean, the sample std (0
    for one seed) and the count over seeds. ``source``: where per-image blocks are; ``readings``:
    how the model of each row's oldest record was read (its ``model_info["reading"]``)."""
    # each key column factorised once here; every later grouping reads its codes
    flat = flat.astype({k: "category" for k in ("model", "sha", "data", "seed", *COL_KEYS)})
    flat = disambiguate_data(disambiguate_models(flat))
    conflicts = fingerprint_conflicts(flat)
    source = source or bootstrap.PerImageSource()
    if flat.empty:
        empty = np.zeros((0, 0))
        return RunTable([], [], empty, empty, empty.astype(int), {}, [], [], {}, source)
    flat = flat.sort_values("created", na_position="first", kind="stable")
    flat = flat[~pd.Series(group_ids(flat, ["model", *COL_KEYS, "seed"], na_is_value=True)).duplicated(
        keep="last").to_numpy()]  # of a re-run, the newest
    cell = group_ids(flat, ["model", *COL_KEYS])  # integers: one factorisation per key column
    flat, cell = flat[cell >= 0], cell[cell >= 0]
    cell = pd.factorize(cell)[0]
    groups = flat.groupby(cell, sort=True)  # the one group-by; codes number cells by first appearance
    cells = groups.agg(mean=("value", "mean"), n=("value", "count"), id=("id", "first"),
                       file=("file", "first"), per_image=("per_image", "max"))
    first = np.unique(cell, return_index=True)[1]  # each cell's first row gives its model and key
    cell_models = flat["model"].to_numpy()[first].tolist()  # lists: pandas strings iterate slowly
    cell_keys = list(zip(*(flat[k].to_numpy()[first].tolist() for k in COL_KEYS)))
    models, keys = sorted(set(cell_models)), sorted(set(cell_keys), key=column_sort_key)
    row, col = {m: i for i, m in enumerate(models)}, {c: j for j, c in enumerate(keys)}
    ii = np.array([row[m] for m in cell_models], dtype=int)
    jj = np.array([col[c] for c in cell_keys], dtype=int)
    shape = (len(models), len(keys))
    mean, std, n = np.full(shape, np.nan), np.full(shape, np.nan), np.zeros(shape, dtype=int)
    counts = cells["n"].to_numpy(dtype=int)
    mean[ii, jj] = cells["mean"].to_numpy(dtype=float)
    std[ii, jj] = _sample_std(cell, flat["value"].to_numpy(dtype=float), counts)
    n[ii, jj] = counts
    single = (counts == 1) & cells["per_image"].to_numpy(dtype=bool)
    per_image = {(int(i), int(j)): (rid, file) for i, j, rid, file in
                 zip(ii[single], jj[single], cells["id"].to_numpy()[single], cells["file"].to_numpy()[single])}
    first = flat.drop_duplicates("model")  # each model's oldest number: its method, arch, ...
    info = {m: {k: (None if pd.isna(v) else v) for k, v in zip(MODEL_INFO, vals)}
            for m, *vals in zip(first["model"].tolist(), *(first[k].tolist() for k in MODEL_INFO))}
    if readings is not None:
        for m, text in zip(first["model"].tolist(), readings(first["id"].tolist(), first["file"].tolist())):
            if text is not None:
                info[m]["reading"] = text
    return RunTable(models, keys, mean, std, n, info, [conflict_message(c) for c in conflicts], conflicts,
                    per_image, source)


def _sample_std(codes: np.ndarray, values: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Each group's sample std (ddof 1; 0 for one value), two-pass as pandas' Series.std sums
    it, so a cell's std is the one a per-group ``std(ddof=1)`` gives."""
    k = len(counts)
    avg = np.bincount(codes, values, minlength=k) / counts
    squares = np.bincount(codes, (values - avg[codes]) ** 2, minlength=k)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(counts > 1, np.sqrt(squares / np.maximum(counts - 1, 1)), 0.0)


MODEL_INFO = ("method", "context", "arch", "pretrain_data", "epochs", "sha")  # RunTable.model_info's fields


def table_of_records(records: Iterable[dict] | pd.DataFrame, kept_in: Path | None = None) -> RunTable:
    """The RunTable of records given as dicts (or a load_results() frame, read off its columns:
    no record is made of it again): their number rows in the order of their files, their per-image
    blocks in memory. ``kept_in``: the records folder they were written to; the intervals of those
    whose file is there are kept beside its index, as a folder's own are (keyed by the file's
    stamp), instead of computed again on every call."""
    if isinstance(records, pd.DataFrame):
        return _table_of_frame(records, kept_in)
    records = file_order(r for r in records if is_record(r))
    numbered = [(r, record_numbers(r)) for r in records]  # each record's rows, made once
    blocks = {numbers[0][0]: r["per_image"] for r, numbers in numbered if numbers and r.get("per_image") is not None}
    models = {numbers[0][0]: r["model"] for r, numbers in numbered if numbers}  # row id: a record's id

    def readings(ids: list[str], files: list[str]) -> list[str | None]:
        return [model_reading(models[i]) if i in models else None for i in ids]

    flat = numbers_frame([("", *n) for _, numbers in numbered for n in numbers])
    table = _table_of_rows(flat, blocks, kept_in, readings)
    table.no_number = undefined_parts(records)
    return table


def _table_of_frame(df: pd.DataFrame, kept_in: Path | None) -> RunTable:
    """:func:`table_of_records` of a load_results() frame: its rows' numbers, each record's
    per-image block (``rec.per_image``), reading (``rec.model.*``) and parts without a number
    (harness.results.pair_status.frame_parts) from its columns."""
    rows = frame_in_file_order(df)
    ids = rows["record_id"].astype(object).tolist()
    blocks = {}
    if "rec.per_image" in rows.columns:
        blocks = {i: b for i, b in zip(ids, rows["rec.per_image"].tolist()) if b is not pd.NA and b is not None}
    model_cols = [c for c in rows.columns if str(c).startswith("rec.model.")]
    first = dict(zip(ids[::-1], range(len(ids) - 1, -1, -1)))  # each record's first row

    def readings(want: list[str], files: list[str]) -> list[str | None]:
        return [model_reading({c[len("rec.model."):]: v for c, v in zip(model_cols, rows[model_cols].iloc[first[i]])
                               if v is not pd.NA}) if i in first else None for i in want]

    table = _table_of_rows(numbers_of_frame(rows), blocks, kept_in, readings)
    table.no_number = parts_of(frame_parts(rows))
    return table


def _table_of_rows(flat: pd.DataFrame, blocks: dict, kept_in: Path | None, readings: Readings) -> RunTable:
    if kept_in is None or not Path(kept_in).is_dir() or not blocks:
        return table_of_numbers(flat, bootstrap.PerImageSource(blocks=blocks), readings)
    stamps = {}
    for rid in blocks:
        try:
            st = (Path(kept_in) / f"{rid}.json").stat()
        except OSError:
            continue
        stamps[f"{rid}.json"] = (st.st_mtime_ns, st.st_size)
    if not stamps:
        return table_of_numbers(flat, bootstrap.PerImageSource(blocks=blocks), readings)
    flat["file"] = [f"{rid}.json" if f"{rid}.json" in stamps else "" for rid in flat["id"].tolist()]
    return table_of_numbers(flat, bootstrap.PerImageSource(blocks=blocks, index=index_of(Path(kept_in)),
                                                           stamps=stamps), readings)


def table_of_folder(folder: str | Path) -> RunTable:
    """The RunTable of a records folder, read from its index's number rows (no record is
    parsed) and kept beside the index for this set of record files (harness.results.kept_table);
    per-image blocks are read from the index on demand, intervals kept beside it."""
    index = index_of(Path(folder))
    served = index.served()
    stamps = {r.name: (r.mtime_ns, r.size) for r in served}
    source = bootstrap.PerImageSource(index=index, stamps=stamps)
    key = kept_table.records_key(stamps)
    kept = kept_table.load(index.path.parent, key) if not index.in_memory else None
    no_number = parts_of(index.parts(served))
    if kept is not None:
        intervals = kept.pop("intervals")
        table = RunTable(**kept, messages=[conflict_message(c) for c in kept["conflicts"]], source=source,
                         no_number=no_number)
        table.__dict__["intervals"] = intervals  # the cached property's value, as kept
        return table
    rows, _ = index.numbers(served)
    table = table_of_numbers(numbers_frame(rows), source,
                             lambda ids, files: list(map(index.readings(files).get, files)))
    if not index.in_memory:
        kept_table.keep(index.path.parent, key, table)
    table.no_number = no_number
    return table


def run_table(source: RunTable | pd.DataFrame | Iterable[dict]) -> RunTable:
    """A RunTable as it is; else the RunTable of records (dicts) or of a load_results() frame."""
    if isinstance(source, RunTable):
        return source
    return table_of_records(source)


def headline_keys(t: RunTable) -> list[tuple]:
    """The columns of each (protocol, dataset, split, variant, fingerprint)'s headline metric."""
    by_group: dict[tuple, list[str]] = defaultdict(list)
    for c in t.keys:
        by_group[(c[0], c[1], c[2], c[3], c[5])].append(c[4])
    return [c for c in t.keys if c[4] == headline_metric(c[0], by_group[(c[0], c[1], c[2], c[3], c[5])])]


__all__ = ["RunTable", "run_table", "table_of_numbers", "table_of_records", "table_of_folder", "headline_keys",
           "column_sort_key", "t975", "LEVELS", "STATS", "COL_KEYS", "CI_SEEDS", "CI_NONE", "CI_COMPUTED"]

