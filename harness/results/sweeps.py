"""Whole sweeps, not only their best cell: the report's table per sweep.

A protocol that trains one setting at several values and reports the best (a learning-rate
sweep) keeps every value's number in its records' params as ``<metric>_by_<setting>``:
``{"0.01": 27.5, "0.03": 31.2}`` (the linear probe's ``top1_by_base_lr``, the segmentation
protocols' ``mIoU_by_lr``). Records of a sweep on one (protocol, dataset, split) make one table:
a row per model and per value of the fingerprinted settings that tell one model's runs apart
(``weight_decay``: runs at several weight decays give the lr x wd grid), a column per swept
value, each cell the mean over the runs' seeds (n when > 1), the best of the row marked.
Nothing here computes a number: the cells are the records' own.
"""
from __future__ import annotations

import html
import re
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from harness.protocol_info import setting_names
from harness.variants import fraction_value

SWEEP_PARAM = re.compile(r"^(?P<metric>[A-Za-z0-9]+)_by_(?P<setting>[A-Za-z0-9_]+)$")
esc = html.escape


@dataclass
class SweepRow:
    model: str
    settings: str  # what tells this row's runs from the sweep's other rows ("weight_decay=0.0001"), or ""
    cells: dict[str, list[float]] = field(default_factory=dict)  # swept value -> one number per run

    def means(self) -> dict[str, float]:
        return {v: sum(xs) / len(xs) for v, xs in self.cells.items()}


@dataclass
class Sweep:
    protocol: str
    dataset: str
    split: str
    metric: str
    setting: str
    values: list[str]  # the columns, in numeric order
    rows: list[SweepRow]


def _value_order(v: str) -> tuple:
    f = fraction_value(v)
    return (0, f, v) if f is not None else (1, 0.0, v)


def _is_sweep(value: Any) -> bool:
    return (isinstance(value, dict) and len(value) > 1
            and all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in value.values()))


def _scalar(v: Any) -> bool:
    return v is None or isinstance(v, (str, int, float, bool))


def find_sweeps(records: list[dict]) -> list[Sweep]:
    """Every sweep the records keep, one Sweep per (protocol, dataset, split, metric, setting);
    a run (its weights, request and data) counts once, however many records it wrote."""
    groups: dict[tuple, dict[tuple, dict]] = defaultdict(dict)
    for rec in records:
        proto = rec.get("protocol") or {}
        params = proto.get("params") or {}
        for key, value in params.items():
            m = SWEEP_PARAM.match(key)
            if not m or not _is_sweep(value):
                continue
            gkey = (proto.get("name"), proto.get("dataset"), proto.get("split"), m["metric"], m["setting"])
            run = ((rec.get("model") or {}).get("weights_key") or (rec.get("model") or {}).get("name"),
                   (rec.get("model") or {}).get("name"), proto.get("fingerprint"), proto.get("request"),
                   proto.get("data_stamp"), rec.get("seed"))
            groups[gkey].setdefault(run, {"model": rec["model"]["name"], "params": params, "sweep": value})
    out = []
    for (protocol, dataset, split, metric, setting), runs in groups.items():
        kinds = setting_names(protocol)
        fingerprinted = kinds[0] if kinds else set()
        by_model: dict[str, list[dict]] = defaultdict(list)
        for r in runs.values():
            by_model[r["model"]].append(r["params"])
        # the settings that tell one model's runs apart (a weight decay per run: the lr x wd grid)
        varying = sorted(
            k for k in fingerprinted if k != setting
            and all(_scalar(r["params"].get(k)) for r in runs.values())
            and any(len({repr(p.get(k)) for p in ps}) > 1 for ps in by_model.values()))
        rows: dict[tuple, SweepRow] = {}
        for r in runs.values():
            label = ", ".join(f"{k}={r['params'].get(k)}" for k in varying)
            row = rows.setdefault((r["model"], label), SweepRow(r["model"], label))
            for v, x in r["sweep"].items():
                row.cells.setdefault(str(v), []).append(float(x))
        values = sorted({v for row in rows.values() for v in row.cells}, key=_value_order)
        out.append(Sweep(protocol, dataset, split, metric, setting, values,
                         sorted(rows.values(), key=lambda r: (r.model, r.settings))))
    return sorted(out, key=lambda s: (s.protocol, s.dataset or "", s.split or "", s.metric, s.setting))


def _sweep_table(s: Sweep) -> str:
    show_settings = any(r.settings for r in s.rows)
    head = "<th class=\"name\">model</th>" + ("<th class=\"name\">settings</th>" if show_settings else "")
    head += "".join(f"<th>{esc(s.setting)}={esc(v)}</th>" for v in s.values)
    body = []
    for r in s.rows:
        means = r.means()
        best = max(means.values()) if means else None
        tds = f'<td class="name">{esc(r.model)}</td>' + (f'<td class="text">{esc(r.settings)}</td>'
                                                           if show_settings else "")
        for v in s.values:
            if v not in means:
                tds += "<td></td>"
                continue
            n = len(r.cells[v])
            cls = ' class="best"' if means[v] >= best - 1e-12 else ""
            tds += f"<td{cls}>{means[v]:.2f}{f' (n={n})' if n > 1 else ''}</td>"
        body.append(f"<tr>{tds}</tr>")
    return f'<table class="sweep"><thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table>'


def sweeps_section(records: list[dict]) -> str:
    """The report's section of every sweep the records keep; "" when they keep none."""
    found = find_sweeps(records)
    if not found:
        return ""
    out = ['<section id="sweeps"><h2>Sweeps</h2><p class="note">Every value of a swept setting, not only the '
           "best: the records' own numbers (<code>&lt;metric&gt;_by_&lt;setting&gt;</code> in their params), "
           "the mean over a run's seeds (n when &gt; 1); the best of each row marked. Rows differ by model and by "
           "the protocol settings named beside it.</p>"]
    for s in found:
        out.append(f"<h3>{esc(s.protocol)} — {esc(s.dataset or '')}/{esc(s.split or '')} — {esc(s.metric)} "
                   f"by {esc(s.setting)}</h3>")
        out.append(_sweep_table(s))
    out.append("</section>")
    return "\n".join(out)


__all__ = ["SWEEP_PARAM", "Sweep", "SweepRow", "find_sweeps", "sweeps_section"]
