"""Result records as rows of numbers: the layer under the leaderboard, the report and compare.

``flatten_records`` turns records into one row per number: model, weights, the column key
(protocol, dataset, split, variant, metric, fingerprint), seed and value, and whether the record
keeps per-image statistics: the rows a records folder's index keeps (``numbers_frame`` of
RecordIndex.numbers), so a table is made one way whether its records come as dicts or from a
folder. ``numbers_of_frame`` reads the same rows off a harness.results.records.load_results()
frame's columns, without making records of it again. Rows come in the order of the records'
files (record id), as a folder's index serves them: a cell's sums add in one order. Everything
that groups those rows into cells goes through here:
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


def file_order(records: Iterable[dict]) -> list[dict]:
    """The records in the order of their files in a records folder (``<id>.json``, as its index
    serves them), each one once as given: a table of them adds its cells' numbers in the order a
    table of their folder does."""
    return sorted(records, key=lambda r: f"{r.get('id') or ''}.json")


def flatten_records(records: Iterable[dict] | pd.DataFrame) -> pd.DataFrame:
    """The numbers tables are built from (columns ``FLAT_COLUMNS``) of records, or of a
    harness.results.records.load_results() frame (:func:`numbers_of_frame`): the same rows a
    records folder's index keeps (harness.results.index.record_numbers), in its order, so that
    a table of records given as dicts and one of a folder are made one way."""
    if isinstance(records, pd.DataFrame):
        return numbers_of_frame(records)
    return numbers_frame([("", *n) for r in file_order(r for r in records if is_record(r))
                          for n in record_numbers(r)])


def frame_in_file_order(df: pd.DataFrame) -> pd.DataFrame:
    """A load_results() frame's rows in the order of their records' files (stable: each record's
    numbers keep theirs)."""
    names = (df["record_id"].astype(object).fillna("") + ".json").to_numpy(dtype=object)
    return df.iloc[np.argsort(names, kind="stable")] if len(df) else df


def _raw(df: pd.DataFrame, column: str) -> list:
    """A load_results() frame's raw column (``rec.…``) as a list; pd.NA where a record lacks the
    field (the whole column where none has it)."""
    return df[column].tolist() if column in df.columns else [pd.NA] * len(df)


def _texts(series: pd.Series, missing=None) -> list:
    return [missing if v is pd.NA or v is None else v for v in series.astype(object).tolist()]


def numbers_of_frame(df: pd.DataFrame) -> pd.DataFrame:
    """The number rows (columns ``FLAT_COLUMNS``) of a harness.results.records.load_results()
    frame, read off its columns as harness.results.index.record_numbers reads a record: its rows
    with a metric, in the order of their records' files."""
    from harness.context import context_kind

    rows = frame_in_file_order(df[df["metric"].notna()]) if len(df) else df
    weights = [str(w or c or "").removeprefix("weights-") for w, c in
               zip(_texts(rows["weights_key"], ""), _texts(rows["checkpoint_sha256"], ""))]
    contexts = [context_kind({k: v for k, v in (("context", ctx), ("method", meth)) if v is not pd.NA})
                for ctx, meth in zip(_raw(rows, "rec.model.context"), _raw(rows, "rec.model.method"))]
    stamps = _raw(rows, "rec.protocol.data_stamp")
    data = ["" if v is None else str(v) for v in
            (s if s is not pd.NA and s is not None else r for s, r in zip(stamps, _texts(rows["data_root"])))]
    created = rows["created"].dt.tz_localize(None).to_numpy(dtype="datetime64[us]")
    seconds = np.where(np.isnat(created), np.nan, created.astype(np.int64) / 1e6)  # as datetime.timestamp()
    per_image = [int(v is not pd.NA and v is not None) for v in _raw(rows, "rec.per_image")]
    columns = dict(record_id=_texts(rows["record_id"]), model=_texts(rows["model"]), sha=weights,
                   method=_texts(rows["method"]), context=contexts, arch=_texts(rows["arch"]),
                   pretrain_data=_texts(rows["pretrain_data"]), epochs=_texts(rows["epochs"]),
                   protocol=_texts(rows["protocol"]), dataset=_texts(rows["dataset"], ""),
                   split=_texts(rows["split"], ""), variant=_texts(rows["variant"], ""),
                   metric=_texts(rows["metric"]), fingerprint=_texts(rows["fingerprint"], ""),
                   seed=_texts(rows["seed"]), created=[None if s != s else s for s in seconds.tolist()],
                   data=data, value=rows["value"].astype(float).tolist(), per_image=per_image)
    return numbers_frame(list(zip([""] * len(rows), *(columns[f] for f in NUMBER_FIELDS))))


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


__all__ = ["SHORT_FP", "FLAT_COLUMNS", "IncomparableResultsError", "column_label", "file_order", "flatten_records",
           "frame_in_file_order", "numbers_frame", "numbers_of_frame",
           "group_ids", "disambiguate_data", "disambiguate_models", "fingerprint_conflicts", "conflict_message"]
