"""Margins: does each model beat a set of reference rows by a stated amount?

A suite's ``margins:`` block names reference rows (for example random init over several init
seeds), the models to check and, per check, a protocol column (protocol, dataset, variant,
metric) and the margin it asks for. A model passes a check iff its mean over seeds is better
than the mean of the reference rows, in the metric's direction (harness.metrics: higher, or
lower for a lower-is-better metric such as an RMSE), by at least ``at_least`` and by more than
``std_factor`` standard deviations of the reference rows (each reference row its mean over
seeds; sample std), so a margin is never smaller than the baseline's own noise. A row's
``margin`` is that gain: positive when the model is better, whichever way better points.
"""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from typing import Any

from harness.protocol_info import metric_of
from harness.text_table import text_table


@dataclass
class MarginCheck:
    protocol: str
    metric: str
    at_least: float
    dataset: str | None = None  # the protocol's dataset name in the records; None = any
    variant: dict[str, Any] = field(default_factory=dict)  # keys the records' variant must have


@dataclass
class MarginSpec:
    reference: list[str]  # model names of the reference rows
    models: list[str]
    checks: list[MarginCheck]
    std_factor: float = 3.0


def _values(records: list[dict], check: MarginCheck) -> list[float]:
    """The check's numbers among one model's records."""
    out = []
    for r in records:
        proto = r.get("protocol") or {}
        if proto.get("name") != check.protocol:
            continue
        if check.dataset is not None and proto.get("dataset") != check.dataset:
            continue
        variant = r.get("variant") or {}
        if any(str(variant.get(k)) != str(v) for k, v in check.variant.items()):
            continue
        value = (r.get("metrics") or {}).get(check.metric)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            out.append(float(value))
    return out


def _label(check: MarginCheck) -> str:
    variant = ",".join(f"{k}={v}" for k, v in check.variant.items())
    return " ".join(t for t in (check.protocol, check.dataset or "", variant, check.metric) if t)


def check_margins(spec: MarginSpec, records: list[dict]) -> list[dict[str, Any]]:
    """One row per (check, model): model mean, reference mean and std, margin, needed, verdict."""
    rows = []
    by_model: dict[str, list[dict]] = {}  # read once, not once per (check, model)
    for r in records:
        by_model.setdefault((r.get("model") or {}).get("name"), []).append(r)
    for check in spec.checks:
        refs = [statistics.fmean(v) for m in spec.reference if (v := _values(by_model.get(m, []), check))]
        ref_mean = statistics.fmean(refs) if refs else math.nan
        ref_std = statistics.stdev(refs) if len(refs) > 1 else math.nan
        needed = max(check.at_least, spec.std_factor * ref_std) if refs else math.nan
        for model in spec.models:
            vals = _values(by_model.get(model, []), check)
            row = {"check": _label(check), "model": model, "reference_mean": ref_mean, "reference_std": ref_std,
                   "reference_n": len(refs), "needed": needed}
            if not vals or not refs:
                rows.append({**row, "mean": math.nan, "margin": math.nan, "verdict": "not measured"})
                continue
            mean = statistics.fmean(vals)
            margin = metric_of(check.protocol, check.metric).gain(mean, ref_mean)  # > 0: better
            ok = margin >= check.at_least and (len(refs) < 2 or margin > spec.std_factor * ref_std)
            rows.append({**row, "mean": mean, "margin": margin, "verdict": "pass" if ok else "FAIL"})
    return rows


def format_margins(spec: MarginSpec, rows: list[dict[str, Any]]) -> str:
    head = ["check", "model", "mean", "reference", "margin", "needed", "verdict"]
    body = [[r["check"], r["model"], f"{r['mean']:.2f}",
             f"{r['reference_mean']:.2f} ± {r['reference_std']:.2f} (n={r['reference_n']})",
             f"{r['margin']:+.2f}", f">= {r['needed']:.2f}", r["verdict"]] for r in rows]
    rule = (f"a model passes iff its mean beats the mean of {', '.join(spec.reference)} by the check's "
            f"margin and by more than {spec.std_factor:g} std of those rows")
    lower = sorted({c.metric for c in spec.checks if not metric_of(c.protocol, c.metric).higher_is_better})
    if lower:  # said only where a metric reads the other way round
        rule += (f"; lower is better for {', '.join(lower)}: there the margin is how much lower the model's "
                 "mean is (positive: better)")
    return "\n".join(["Margins over the reference rows", text_table(head, body), rule])


def margins_failed(rows: list[dict[str, Any]]) -> list[str]:
    return [f"margin {r['check']} for {r['model']}: {r['verdict']} (better by {r['margin']:+.2f}, "
            f"needed {r['needed']:.2f})" for r in rows if r["verdict"] != "pass"]
