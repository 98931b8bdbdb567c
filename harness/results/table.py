"""Result records as rows of numbers: the layer under the leaderboard, the report and compare.

``flatten_records`` turns records (or a harness.results.records.load_results() frame) into one row
per number: model, weights, the column key (protocol, dataset, split, variant, metric,
fingerprint), seed and value (and the record's per-image statistics, where it keeps them). Everything that groups those rows into cells goes through here:
two checkpoints under one name become ``name@sha8`` rows (``disambiguate_models``), one
dataset measured on several data sets becomes ``dataset@data8`` columns
(``disambiguate_data``), and a column measured under several protocol fingerprints is a
conflict (``fingerprint_conflicts``, ``conflict_message``): those numbers cannot be compared.
"""
from __future__ import annotations

from typing import Iterable

import pandas as pd

from harness.context import context_kind
from harness.errors import ConfigError
from harness.results.records import load_results

SHORT_FP = 8  # characters of a fingerprint shown in labels
FLAT_COLUMNS = ["model", "sha", "method", "context", "arch", "pretrain_data", "epochs", "protocol", "dataset", "split",
                "variant", "metric", "fingerprint", "seed", "created", "value", "id", "data", "per_image"]


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


def flatten_records(records: Iterable[dict] | pd.DataFrame) -> pd.DataFrame:
    """The numbers tables are built from (columns ``FLAT_COLUMNS``): a
    harness.results.records.load_results() frame (or the records, loaded into one), with "" for
    missing keys and the weights label as ``sha``."""
    frame = records if isinstance(records, pd.DataFrame) else load_results(list(records))
    frame = frame[frame["metric"].notna()]  # records without numbers (e.g. per-class lists only)
    if frame.empty:
        return pd.DataFrame(columns=FLAT_COLUMNS)
    weights = frame["weights_key"].fillna(frame["checkpoint_sha256"]).fillna("")
    blank = lambda c: frame[c].astype(object).where(frame[c].notna(), "")  # noqa: E731
    flat = pd.DataFrame({
        "model": frame["model"].astype(object), "sha": weights.str.removeprefix("weights-").astype(object),
        "method": frame["method"].astype(object), "context": _context_kinds(frame),
        "arch": frame["arch"].astype(object),
        "pretrain_data": frame["pretrain_data"].astype(object), "epochs": frame["epochs"].astype(object),
        "protocol": frame["protocol"].astype(object), "dataset": blank("dataset"), "split": blank("split"),
        "variant": blank("variant"), "metric": frame["metric"].astype(object),
        "fingerprint": blank("fingerprint"), "seed": frame["seed"].astype(object),
        "created": frame["created"], "value": frame["value"].astype(float), "id": frame["record_id"].astype(object),
        "data": _data_labels(frame),
        # the record's per-image statistics (harness.per_image), for a one-seed cell's bootstrap
        "per_image": (frame["rec.per_image"] if "rec.per_image" in frame
                      else pd.Series(None, index=frame.index, dtype=object)),
    }, columns=FLAT_COLUMNS)
    return flat.reset_index(drop=True)


def _context_kinds(frame: pd.DataFrame) -> pd.Series:
    """Which context row (harness.context) each number belongs to; None for a method's model."""
    stated = frame["rec.model.context"] if "rec.model.context" in frame else pd.Series(pd.NA, index=frame.index)
    return pd.Series([context_kind({"method": m} if pd.isna(c) and c is not None else {"context": c, "method": m})
                      for c, m in zip(stated, frame["method"])], index=frame.index, dtype=object)


def _data_labels(frame: pd.DataFrame) -> pd.Series:
    """Which data each number was measured on: its content stamp, else its resolved root."""
    def column(name: str) -> pd.Series:
        return frame[name] if name in frame else pd.Series(pd.NA, index=frame.index)
    return column("rec.protocol.data_stamp").fillna(column("rec.protocol.data_root")).fillna("").astype(str)


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


__all__ = ["SHORT_FP", "FLAT_COLUMNS", "IncomparableResultsError", "column_label", "flatten_records",
           "disambiguate_data", "disambiguate_models", "fingerprint_conflicts", "conflict_message"]
