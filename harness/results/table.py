"""Result records as rows of numbers: the layer under the leaderboard, the report and compare.

``flatten_records`` turns records (or a harness.results.records.load_results() frame) into one row
per number: model, weights, the column key (protocol, dataset, split, variant, metric,
fingerprint), seed and value, and whether the record keeps per-image statistics: the rows a
records folder's index keeps (``numbers_frame`` of RecordIndex.numbers), so a table is made one
way whether its records come as dicts or from a folder. Everything that groups those rows into
cells goes through here:
two checkpoints under one name become ``name@sha8`` rows (``disambiguate_models``), one
dataset measured on several data sets becomes ``dataset@data8`` columns
(``disambiguate_data``), and a column measured under several protocol fingerprints is a
conflict (``fingerprint_conflicts``, ``conflict_message``): those numbers cannot be compared.
"""
from __future__ import annotations

from typing import Iterable

import numpy as np
import pandas as pd

from harness.errors import ConfigError
from harness.results.index import NUMBER_FIELDS, is_record, record_numbers
from harness.results.records import to_records

SHORT_FP = 8  # characters of a fingerprint shown in labels
# The rows tables are made of: one per number (harness.results.index.record_numbers), ``id``
# the record's id, ``file`` its file in a records folder ("" for records given as dicts),
# ``per_image`` whether the record keeps per-image statistics, ``created`` in seconds.
FLAT_COLUMNS = ["model", "sha", "method", "context", "arch", "pretrain_data", "epochs", "protocol", "dataset", "split",
                "variant", "metric", "fingerprint", "seed", "created", "value", "id", "data", "per_image", "file"]


class IncomparableResultsError(ConfigError):
    """Records measured under different protocol fingerprints were asked to share a cell."""


def column_label(col: tuple, with_fp: bool = False) -> str:
    """Flat text label of a column key (protocol, dataset, split, variant, metric, fp[, stat])."""
    protocol, dataset, split, variant, metric, fp = col[:6]
    parts = [protocol, f"{dataset}/{split}" if split else dataset]
    if variant:
        parts.append(variant)
    parts.append(metric)
    label = " | ".join(str(p) for p in parts)
    return f"{label} @{fp[:SHORT_FP]}" if with_fp else label


def numbers_frame(rows: list[tuple]) -> pd.DataFrame:
    """The frame (columns ``FLAT_COLUMNS``) of number rows: (file, *NUMBER_FIELDS) tuples, as a
    records folder's index serves them (RecordIndex.numbers) or :func:`flatten_records` makes them."""
    frame = pd.DataFrame.from_records(rows, columns=["file", *NUMBER_FIELDS])
    frame = frame.rename(columns={"record_id": "id"})
    frame["seed"] = frame["seed"].astype("Int64")
    frame["created"] = frame["created"].astype(float)
    frame["value"] = frame["value"].astype(float)
    frame["per_image"] = frame["per_image"].astype(bool)
    return frame[FLAT_COLUMNS]


def flatten_records(records: Iterable[dict] | pd.DataFrame) -> pd.DataFrame:
    """The numbers tables are built from (columns ``FLAT_COLUMNS``) of records, or of a
    harness.results.records.load_results() frame (its rows' numbers): the same rows a records
    folder's index keeps (harness.results.index.record_numbers), so that a table of records
    given as dicts and one of a folder are made one way."""
    if isinstance(records, pd.DataFrame):
        records = to_records(records) if len(records) else []
    return numbers_frame([("", *n) for r in records if is_record(r) for n in record_numbers(r)])


def group_ids(frame: pd.DataFrame, columns: list[str], na_is_value: bool = False) -> np.ndarray:
    """Each row's combination of ``columns`` as a compact integer, numbered in order of first
    appearance (the order of ``groupby(columns, sort=False)``'s groups). A missing value makes
    the row -1 (a group-by drops it), or with ``na_is_value`` a value of its own (as
    ``drop_duplicates`` counts it). One factorisation per column: grouping by several string
    columns at once factorises them again for every group-by."""
    ids = np.zeros(len(frame), dtype=np.int64)
    missing = np.zeros(len(frame), dtype=bool)
    for column in columns:
        codes, uniques = pd.factorize(frame[column], use_na_sentinel=not na_is_value)
        missing |= codes < 0
        ids = pd.factorize(ids * (len(uniques) + 1) + codes + 1)[0]  # renumbered: no overflow
    return np.where(missing, -1, ids) if missing.any() else ids


def _groups_with_several(frame: pd.DataFrame, keys: list[str], column: str) -> np.ndarray:
    """Rows whose group of ``keys`` holds more than one distinct value of ``column``."""
    ids = group_ids(frame, keys)
    values = pd.factorize(frame[column])[0]
    kept = (ids >= 0) & (values >= 0)  # as nunique: missing keys or values do not count
    pairs = np.unique(np.stack([ids[kept], values[kept]]), axis=1)
    several = np.zeros(ids.max() + 2 if len(ids) else 1, dtype=bool)
    groups, counts = np.unique(pairs[0], return_counts=True)
    several[groups[counts > 1]] = True
    return several[ids] & (ids >= 0)


def disambiguate_data(flat: pd.DataFrame) -> pd.DataFrame:
    """A (protocol, dataset, split) measured on several data sets (other roots or contents)
    becomes one ``dataset@data8`` column per data set, never one cell mixing or hiding them."""
    mask = _groups_with_several(flat, ["protocol", "dataset", "split"], "data")
    if not mask.any():
        return flat
    flat = flat.copy()
    dataset = flat["dataset"].astype(object)  # new names: a categorical column holds only its own
    dataset[mask] = dataset[mask] + "@" + flat.loc[mask, "data"].astype(object).str[:8]
    flat["dataset"] = dataset
    return flat


def disambiguate_models(flat: pd.DataFrame) -> pd.DataFrame:
    """Two different checkpoints under one name become ``name@sha8`` rows, never one row."""
    mask = _groups_with_several(flat, ["model"], "sha")
    if mask.any():
        flat = flat.copy()
        model = flat["model"].astype(object)  # new names: a categorical column holds only its own
        model[mask] = model[mask] + "@" + flat.loc[mask, "sha"].astype(object).str[:8]
        flat["model"] = model
    return flat


def fingerprint_conflicts(records: Iterable[dict] | pd.DataFrame) -> list[dict]:
    """Each (protocol, dataset, split, variant, metric) measured under > 1 fingerprint: its key,
    ``fingerprints`` and ``models`` ({fingerprint: model names}). ``records``: records, a
    load_results() frame, or flatten_records' rows."""
    flat = records if isinstance(records, pd.DataFrame) and "sha" in records.columns else flatten_records(records)
    out = []
    keys = ["protocol", "dataset", "split", "variant", "metric"]
    if flat.empty:
        return out
    conflicted = flat[_groups_with_several(flat, keys, "fingerprint")]  # only these are grouped
    for key, grp in conflicted.groupby(keys, sort=True, observed=True):
        fps = sorted(grp["fingerprint"].unique())
        out.append({**dict(zip(keys, key)), "fingerprints": fps,
                    "models": {fp: sorted(grp.loc[grp["fingerprint"] == fp, "model"].unique()) for fp in fps}})
    return out


def conflict_message(conflict: dict) -> str:
    """One fingerprint_conflicts entry in words: which column, which fingerprints, which models."""
    c = conflict
    label = column_label((c["protocol"], c["dataset"], c["split"], c["variant"], c["metric"], ""))
    per_fp = "; ".join(f"@{fp[:SHORT_FP]}: {', '.join(models)}" for fp, models in c["models"].items())
    return (f"{label}: records were measured under {len(c['fingerprints'])} different protocol "
            f"fingerprints and cannot be compared ({per_fp}). They are shown as separate columns; "
            f"re-run the models with one protocol configuration to compare them.")


__all__ = ["SHORT_FP", "FLAT_COLUMNS", "IncomparableResultsError", "column_label", "flatten_records", "numbers_frame",
           "group_ids", "disambiguate_data", "disambiguate_models", "fingerprint_conflicts", "conflict_message"]
