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


def disambiguate_data(flat: pd.DataFrame) -> pd.DataFrame:
    """A (protocol, dataset, split) measured on several data sets (other roots or contents)
    becomes one ``dataset@data8`` column per data set, never one cell mixing or hiding them."""
    keys = ["protocol", "dataset", "split"]
    counts = flat.groupby(keys)["data"].transform("nunique")
    if not (counts > 1).any():
        return flat
    flat = flat.copy()
    mask = counts > 1
    flat.loc[mask, "dataset"] = flat.loc[mask, "dataset"] + "@" + flat.loc[mask, "data"].str[:8]
    return flat


def disambiguate_models(flat: pd.DataFrame) -> pd.DataFrame:
    """Two different checkpoints under one name become ``name@sha8`` rows, never one row."""
    shas = flat.groupby("model")["sha"].nunique()
    clash = set(shas[shas > 1].index)
    if clash:
        flat = flat.copy()
        mask = flat["model"].isin(clash)
        flat.loc[mask, "model"] = flat.loc[mask, "model"] + "@" + flat.loc[mask, "sha"].str[:8]
    return flat


def fingerprint_conflicts(records: Iterable[dict] | pd.DataFrame) -> list[dict]:
    """Each (protocol, dataset, split, variant, metric) measured under > 1 fingerprint: its key,
    ``fingerprints`` and ``models`` ({fingerprint: model names}). ``records``: records, a
    load_results() frame, or flatten_records' rows."""
    flat = records if isinstance(records, pd.DataFrame) and "sha" in records.columns else flatten_records(records)
    out = []
    keys = ["protocol", "dataset", "split", "variant", "metric"]
    for key, grp in flat.groupby(keys, sort=True):
        fps = sorted(grp["fingerprint"].unique())
        if len(fps) > 1:
            out.append({**dict(zip(keys, key)), "fingerprints": fps,
                        "models": {fp: sorted(grp.loc[grp["fingerprint"] == fp, "model"].unique())
                                   for fp in fps}})
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
           "disambiguate_data", "disambiguate_models", "fingerprint_conflicts", "conflict_message"]
