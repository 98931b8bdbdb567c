"""Measured against published: which records count for a paper cell, and its verdict.

The rule is strict: a cell's measurement uses only the records whose variant is the table's
protocol exactly (``cell_variant``; several unpinned groups are "ambiguous", never the best of
them), and it passes iff |delta| <= the tolerance the table YAML states with its reason (a
std above the tolerance makes it "inconclusive", never a pass). A cell whose checkpoint,
dataset or protocol is missing says so; it never stops the rest of the table.
``exit_status``: 1 when any cell failed or nothing was measured.
"""
from __future__ import annotations

from types import SimpleNamespace
from typing import Any, Iterable

import pandas as pd

from harness.metrics import Metric
from harness.paper.spec import ProtocolSpec, Table, settings_groups, tolerance_for, variant_matches
from harness.protocol_info import metric_of
from harness.variants import parse_variant
from harness.text_table import text_table

# Verdicts a measured cell can get, and what a cell's `outcome` is: "pass" only for OK;
# "fail" for a cell whose run finished (or broke) without a pass; "not run" for a cell
# nothing was run for (no checkpoint, dataset or protocol), which fails nothing by itself.
OK, DIFFERS, INCONCLUSIVE, AMBIGUOUS, NOT_MEASURED = "ok", "DIFFERS", "inconclusive", "ambiguous", "not measured"
FAILED_RUN = ("failed", "checkpoint error")


def _label(variant: dict[str, Any]) -> str:
    return ",".join(f"{k}={'(absent)' if v is None else v}" for k, v in sorted(variant.items())) or "(no variant)"


def cell_variant(cell: pd.Series, protocol: ProtocolSpec, settings: str = "") -> dict[str, Any]:
    """The variant a record must carry to count for ``cell``: the table's protocol variant
    (its defaults) with the cell's own keys on top. ``settings``: the run's
    ProtocolSpec.variants key (e.g. "memory_size=102400"); its keys are settings of the run,
    not something its records report, so they are dropped from what the records must match."""
    want = {**(protocol.variant or {}), **parse_variant(cell["variant"])}
    drop = set(parse_variant(settings)) if settings else set()
    return {k: v for k, v in want.items() if k not in drop}


def measure_cell(cell: pd.Series, records: list[dict], protocol: ProtocolSpec, settings: str = "") -> dict[str, Any]:
    """Mean/std/n over seeds of the records whose variant is exactly the cell's protocol
    (``cell_variant``; ``settings`` = the run's ProtocolSpec.variants key, whose keys the
    records do not carry). Records that also vary in keys neither the cell nor the table pins
    (e.g. one result per lr when the cell does not say which) are grouped by those keys: one
    group is measured; several are an ambiguity, never resolved by taking the best of them.
    Returns {"status": "measured" | AMBIGUOUS | NOT_MEASURED, "note": ..., measured/std/n}."""
    want = cell_variant(cell, protocol, settings)
    metric = cell["metric"].lower()
    groups: dict[str, list[float]] = {}
    others: set[str] = set()
    for rec in records:
        var = rec.get("variant") or {}
        if not variant_matches(want, var):
            others.add(_label(var))
            continue
        value = next((v for k, v in (rec.get("metrics") or {}).items() if k.lower() == metric), None)
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            continue
        groups.setdefault(_label({k: v for k, v in var.items() if k not in want}), []).append(float(value))
    if not groups:
        seen = f"; the run's records have {'; '.join(sorted(others))}" if others else ""
        return {"status": NOT_MEASURED, "note": f"no {cell['metric']} record with variant {_label(want)}{seen}"}
    if len(groups) > 1:
        parts = [f"{key} (n={len(vals)})" for key, vals in sorted(groups.items())]
        return {"status": AMBIGUOUS,
                "note": f"{len(groups)} variant groups match and neither the cell nor the table's protocol "
                        f"variant says which is the paper's: {'; '.join(parts)}; pin the key in the table "
                        f"YAML (protocols.<name>.variant)"}
    (vals,) = groups.values()
    s = pd.Series(vals)
    return {"status": "measured", "measured": float(s.mean()), "std": float(s.std(ddof=1)) if len(s) > 1 else 0.0,
            "n": len(s), "note": ""}


def verdict(delta: float, std: float, n: int, tolerance: float, metric: Metric | None = None) -> str:
    """Pass iff |delta| <= tolerance. The seed spread only makes it stricter: with several
    seeds whose std exceeds the tolerance the cell is inconclusive, even with a small delta
    (a noisier run never passes more easily). The tolerance is two-sided whatever the metric's
    direction (a reproduction that is far better is not a reproduction either); ``metric``:
    the cell's metric, whose direction a DIFFERS of a lower-is-better metric states in words,
    since its sign reads the other way round."""
    if abs(delta) > tolerance:
        if metric is not None and not metric.higher_is_better:
            word = metric.compare_word(delta, 0.0)
            return f"{DIFFERS} (|delta| > {tolerance:g}; measured is {word}: lower is better)"
        return f"{DIFFERS} (|delta| > {tolerance:g})"
    if n > 1 and std > tolerance:
        return f"{INCONCLUSIVE} (std {std:.2f} > {tolerance:g})"
    return f"{OK} (|delta| <= {tolerance:g})"


def compare_cells(tab: Table, jobs: Iterable[Any]) -> pd.DataFrame:
    """Per cell: measured / std / n / delta / tolerance, a verdict and an outcome (pass, fail,
    not run; see the constants above), and whether the measurement ``reads`` better or worse
    than the paper's by the metric's direction (harness.protocol_info.metric_of). ``jobs``: the
    runs (harness.paper.plan.Job, or anything with its ``protocol``, ``variant``, ``cells``,
    ``status``, ``message``, ``records`` and ``skipped``)."""
    rows = tab.rows.copy()
    for col in ("measured", "std", "delta", "tolerance"):
        rows[col] = float("nan")
    rows["n"] = 0
    rows["verdict"] = "no public checkpoint"
    rows["outcome"] = "not run"
    rows["note"] = ""
    rows["reads"] = ""  # measured vs published by the metric's direction: better, worse, equal
    for job in jobs:
        ps = tab.spec.protocols[job.protocol]
        for idx in job.cells:
            tolerance = tolerance_for(ps, rows.at[idx, "metric"])
            rows.at[idx, "tolerance"] = tolerance
            if job.status != "done":
                rows.at[idx, "verdict"] = job.status
                rows.at[idx, "note"] = job.message
                rows.at[idx, "outcome"] = "fail" if job.status in FAILED_RUN else "not run"
                continue
            m = measure_cell(rows.loc[idx], job.records, ps, job.variant)
            stored = " (stored records)" if job.skipped else ""
            if m["status"] != "measured":
                rows.at[idx, "verdict"], rows.at[idx, "outcome"] = m["status"], "fail"
                rows.at[idx, "note"] = f"{job.protocol}{' ' + job.variant if job.variant else ''}: {m['note']}{stored}"
                continue
            delta = m["measured"] - rows.at[idx, "value"]
            rows.at[idx, "measured"], rows.at[idx, "std"], rows.at[idx, "n"] = m["measured"], m["std"], m["n"]
            rows.at[idx, "delta"] = delta
            metric = metric_of(job.protocol, rows.at[idx, "metric"])
            rows.at[idx, "reads"] = metric.compare_word(m["measured"], rows.at[idx, "value"])
            v = verdict(delta, m["std"], m["n"], tolerance, metric)
            rows.at[idx, "verdict"] = v
            rows.at[idx, "outcome"] = "pass" if v.startswith(OK) else "fail"
            rows.at[idx, "note"] = stored.strip()
    return rows


def exit_status(cells: pd.DataFrame | None) -> int:
    """`ssl-bench reproduce`'s exit status: 0 for a dry run (None) or when at least one cell
    was measured and no cell failed; 1 when any cell failed (DIFFERS, inconclusive,
    ambiguous, not measured by a finished run, or its run failed) or nothing was measured.
    Cells nothing was run for (no checkpoint / dataset / protocol) fail nothing by
    themselves."""
    if cells is None:
        return 0
    if (cells["outcome"] == "fail").any() or not (cells["n"] > 0).any():
        return 1
    return 0


def tolerance_lines(tab: Table) -> list[str]:
    """One line per protocol: the verdict rule's tolerance and why."""
    metrics = tab.rows.groupby("protocol")["metric"].agg(lambda m: sorted(set(m))).to_dict()
    lines = []
    for name, ps in tab.spec.protocols.items():
        own = getattr(ps, "metric_tolerances", None) or {}
        shared = "/".join(m for m in metrics.get(name, []) if m not in own)
        rules = [f"<= {ps.tolerance:g} {shared} points"] if shared or not own else []
        rules += [f"<= {t:g} for {m}" for m, t in sorted(own.items())]
        lines.append(f"  {name}: pass iff |measured - paper| {'; '.join(rules)}"
                     f"{'; variant ' + _label(ps.variant) if ps.variant else ''} - {ps.tolerance_reason}")
    return lines


def format_comparison(cells: pd.DataFrame, title: str = "", show_unreproducible: bool = False,
                      tolerances: list[str] | None = None) -> str:
    """compare_cells' table as text: one line per cell with a checkpoint (every cell with
    ``show_unreproducible``), the counts per verdict and outcome, the exit status and why cells
    have no measurement."""
    shown = cells if show_unreproducible else cells[cells["verdict"] != "no public checkpoint"]
    header = ["row", "model", "zoo", "protocol", "dataset", "variant", "metric", "paper", "measured", "delta",
              "verdict"]
    body = []
    for _, r in shown.iterrows():
        if r["n"] > 0:
            meas = f"{r['measured']:.2f}" + (f" ± {r['std']:.2f} (n={int(r['n'])})" if r["n"] > 1 else "")
            delta = f"{r['delta']:+.2f}"
        else:
            meas, delta = "-", "-"
        body.append([str(r["row"]), f"{r['method']} {r['arch']} {r['pretrain_data']}", r["zoo_name"] or "-",
                     r["protocol"], r["dataset"], r["variant"] or "-", r["metric"], f"{r['value']:.1f}", meas,
                     delta, r["verdict"]])
    out = [title] if title else []
    if tolerances:
        out += ["tolerances (a measured std never widens them; std > tolerance is inconclusive):"] + tolerances
    out.append(text_table(header, body, right={7, 8, 9}) if body else "(no reproducible cells)")
    counts = cells["verdict"].map(lambda v: v.split(" (")[0]).value_counts()
    out.append("")
    out.append("cells: " + ", ".join(f"{v} {k}" for k, v in counts.items()))
    outcomes = cells["outcome"].value_counts()
    status = exit_status(cells)
    why = ("some cell failed" if (cells["outcome"] == "fail").any() else "nothing was measured") if status else \
        "every measured cell passed"
    out.append(f"outcome: {outcomes.get('pass', 0)} pass, {outcomes.get('fail', 0)} fail, "
               f"{outcomes.get('not run', 0)} not run -> exit status {status} ({why})")
    notes = shown[(shown["note"] != "") & (shown["n"] == 0)].drop_duplicates("note")
    if len(notes):
        out.append("why cells have no measurement:")
        out += [f"  - {r['zoo_name']} {r['protocol']}/{r['dataset']}"
                f"{' ' + r['variant'] if r['outcome'] == 'fail' and r['variant'] else ''}: {r['verdict']}: {r['note']}"
                for _, r in notes.iterrows()]
    return "\n".join(out)


# ----------------------------------------------------------------------------- records vs a table
SHORT_FP = 8  # characters of a fingerprint shown in messages


def paper_cells(table: str, records: list[dict], by_model: dict[str, list[dict]] | None = None) -> pd.DataFrame:
    """A published table's cells beside the records (dicts) of the zoo checkpoints it names
    (model name = zoo name, as ``ssl-bench reproduce`` names them): measured, delta, verdict.
    Only records measured under the table's protocol settings count; a cell whose checkpoint
    has records of other settings says so instead (``other settings``). ``by_model``: the
    records grouped by model name, when the caller has them (see :func:`records_by_model`).
    The table's protocol is built (its fingerprint computed) only where a checkpoint has records."""
    from harness.paper.spec import load_table

    by_model = records_by_model(records) if by_model is None else by_model
    tab = load_table(table)
    rows = tab.rows
    jobs = []
    keyed = rows[rows["zoo_name"] != ""]
    for (zoo, protocol, dataset), grp in keyed.groupby(["zoo_name", "protocol", "dataset"], sort=False):
        ds, ps = tab.spec.datasets[dataset], tab.spec.protocols[protocol]
        for settings, cells in settings_groups(grp, ps):
            jobs.append(_records_job(zoo, protocol, dataset, ds, ps, settings, cells, by_model, tab))
    cells = compare_cells(tab, jobs)
    cells.insert(0, "table_name", tab.name)
    cells["title"] = tab.spec.title
    return cells


def _records_job(zoo, protocol, dataset, ds, ps, settings, grp, by_model, tab):
    """The records of ``zoo`` measured under the table's settings (with ``settings``' values)."""
    from harness.protocol_info import build_protocol

    values = {**ps.values, **(ps.variants.get(settings, {}) if settings else {})}
    found = [r for r in by_model.get(zoo, []) if r["protocol"]["name"] == protocol
             and r["protocol"].get("dataset") in (ds.reader, dataset)]
    want = None
    if found:
        try:
            want = build_protocol(protocol, ps.preset, {"dataset": ds.reader, **values},
                                  source=str(tab.source)).fingerprint()
        except Exception:  # a protocol that cannot be built here: match by preset instead
            want = None
    # a settings run (e.g. a training subset whose list is not installed here) is never matched by
    # preset alone: the preset's records are of other settings
    same = [r for r in found if (r["protocol"].get("fingerprint") == want if want
                                 else not settings and r["protocol"].get("preset") == ps.preset)]
    job = SimpleNamespace(protocol=protocol, variant=settings, cells=list(grp.index), records=same, skipped=False,
                          status="done" if same else ("other settings" if found else "no record"),
                          message="")
    if found and not same:
        fps = sorted({f"@{(r['protocol'].get('fingerprint') or '')[:SHORT_FP]}" for r in found})
        job.message = (f"{zoo}'s {protocol} records were measured under {', '.join(fps)}, the table's "
                       f"settings (preset {ps.preset}) give @{(want or '?')[:SHORT_FP]}: not comparable")
    elif not found:
        job.message = f"no record of {zoo} on {protocol}/{dataset}: ssl-bench reproduce {tab.name}"
    return job


def records_by_model(records: Iterable[dict]) -> dict[str, list[dict]]:
    """Record dicts grouped by model name (what paper_cells looks checkpoints up in)."""
    out: dict[str, list[dict]] = {}
    for r in records:
        out.setdefault((r.get("model") or {}).get("name"), []).append(r)
    return out


def all_paper_cells(records: list[dict], tables: Iterable[str] | None = None) -> pd.DataFrame:
    """paper_cells of every table (or of ``tables``), for the cells a record speaks to."""
    from harness.paper.spec import table_files

    by_model = records_by_model(records)
    # each table by its file, the files found once: finding them reads every installed package's
    # entry points (30 ms), more than reading a table
    files = table_files()
    names = sorted(files) if tables is None else tables
    frames = [paper_cells(files.get(str(t), t), records, by_model) for t in names]
    frames = [f for f in frames if len(f)]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


__all__ = ["OK", "DIFFERS", "INCONCLUSIVE", "AMBIGUOUS", "NOT_MEASURED", "FAILED_RUN", "cell_variant", "measure_cell",
           "verdict", "compare_cells", "exit_status", "tolerance_lines", "format_comparison", "paper_cells",
           "all_paper_cells", "records_by_model"]
