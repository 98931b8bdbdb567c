"""The one-screen overview of a run: one row per model, one column per protocol (its headline
metric on one data set and split, direction marked, the best of each column starred), a cell that
is not applicable or failed saying so, then each model's mean rank over the columns it has a
number in and how many that is; and each model's reading (source, input normalisation, readout),
from its records' model block. Placed at the top of leaderboard.md and of the report."""
from __future__ import annotations

import html
from dataclasses import dataclass

import numpy as np

from harness.results.index import model_reading
from harness.results.protocol_tables import protocol_tables
from harness.results.pair_status import FAILED, NOT_APPLICABLE, PairStatus
from harness.results.run_table import RunTable, run_table


@dataclass
class Overview:
    models: list[str]
    headers: list[str]  # one per column, the direction marked (↑ / ↓)
    cells: list[list[str]]  # [model][column]: the number (best starred), "n/a", "failed" or "–"
    mean_rank: list[float | None]
    counts: list[int]


def _column_of(t: RunTable, columns: list[tuple]) -> tuple:
    """The headline column of one (protocol, dataset, split) with the most models measured."""
    return max(columns, key=lambda c: (int((t.n[:, t.col[c]] > 0).sum()), -columns.index(c)))


def _ranks(values: np.ndarray, higher: bool) -> np.ndarray:
    """1 = best; ties share their mean rank; NaN where there is no value."""
    out = np.full(values.shape, np.nan)
    have = ~np.isnan(values)
    v = values[have] if higher else -values[have]
    order = (-v).argsort(kind="stable")
    ranks = np.empty(len(v))
    ranks[order] = np.arange(1, len(v) + 1)
    for value in np.unique(v):  # ties: their mean rank
        ranks[v == value] = ranks[v == value].mean()
    out[have] = ranks
    return out


def build_overview(df, pairs: list[PairStatus] | None = None, digits: int = 2) -> Overview:
    """The overview of a RunTable (or records); ``pairs``: the run's pair states, which say why a
    cell is empty (failed, not applicable)."""
    t = run_table(df)
    state = {}
    for p in pairs or []:
        if p.state in (FAILED, NOT_APPLICABLE):
            state.setdefault((p.model, p.protocol), p.state if p.state == FAILED else "n/a")
    models = list(t.models)
    columns = [_column_of(t, table.columns) for table in protocol_tables(t, headline_only=True) if table.columns]
    headers, cols, ranks = [], [], []
    for c in columns:
        metric = t.metric(c)
        j = t.col[c]
        values = np.where(t.n[:, j] > 0, t.mean[:, j], np.nan)
        best = np.nanmax(values) if metric.higher_is_better else np.nanmin(values)
        arrow = "↑" if metric.higher_is_better else "↓"
        headers.append(f"{c[0]} {c[4]}{' ' + c[3] if c[3] else ''} ({c[1]}) {arrow}")
        cols.append([f"{v:.{digits}f}{'*' if v == best else ''}" if v == v else state.get((m, c[0]), "–")
                     for m, v in zip(models, values.tolist())])
        ranks.append(_ranks(values, metric.higher_is_better))
    models, cols, ranks = _without_numbers(models, cols, ranks, headers, columns, state, pairs or [])
    rank_table = np.array(ranks).T if ranks else np.zeros((len(models), 0))
    # all rows at once, as np.nanmean computes each: the sum of the numbers over their count
    have = ~np.isnan(rank_table)
    counts = have.sum(axis=1).tolist()
    sums = np.where(have, rank_table, 0.0).sum(axis=1).tolist()
    mean_rank = [total / n if n else None for total, n in zip(sums, counts)]
    cells = [list(row) for row in zip(*cols)] if cols else [[] for _ in models]
    order = sorted(range(len(models)), key=lambda i: (mean_rank[i] is None, mean_rank[i] or 0.0, models[i]))
    return Overview([models[i] for i in order], headers, [cells[i] for i in order],
                    [mean_rank[i] for i in order], [counts[i] for i in order])


def _without_numbers(models, cols, ranks, headers, columns, state, pairs):
    """Models and protocols that the run has no number of at all (every pair failed or not
    applicable): a row and a column of their own, each cell saying why."""
    extra_models = [m for m in dict.fromkeys(p.model for p in pairs) if m not in models]
    models = models + extra_models
    cols = [col + [state.get((m, c[0]), "–") for m in extra_models] for col, c in zip(cols, columns)]
    ranks = [np.concatenate([r, np.full(len(extra_models), np.nan)]) for r in ranks]
    measured = {c[0] for c in columns}
    for protocol in dict.fromkeys(p.protocol for p in pairs if (p.model, p.protocol) in state):
        if protocol not in measured:
            headers.append(f"{protocol} (no number)")
            cols.append([state.get((m, protocol), "–") for m in models])
            ranks.append(np.full(len(models), np.nan))
    return models, cols, ranks


LEGEND = ("One row per model, one column per protocol's headline metric (↑ higher is better, ↓ lower), the "
          "best of each column starred; n/a: the protocol cannot measure the model, failed: the pair failed "
          "(see \"Pairs without a number\"), –: not run. Mean rank: over the columns the model has a number "
          "in (1 = best), rows in its order.")


def _rank_text(rank: float | None, count: int, total: int) -> tuple[str, str]:
    return ("–" if rank is None else f"{rank:.2f}"), f"{count} of {total}"


def overview_markdown(o: Overview, readings: dict[str, str] | None = None) -> str:
    if not o.headers:
        return ""
    esc = lambda s: str(s).replace("|", "\\|")  # noqa: E731
    out = ["## Overview", "", LEGEND, "",
           "| model | " + " | ".join(esc(h) for h in o.headers) + " | mean rank | protocols |",
           "|---|" + "---:|" * (len(o.headers) + 2)]
    for m, row, rank, n in zip(o.models, o.cells, o.mean_rank, o.counts):
        out.append("| " + " | ".join(esc(v) for v in [m, *row, *_rank_text(rank, n, len(o.headers))]) + " |")
    if readings:
        out += ["", "How each model was read (source · input normalisation · readout):", ""]
        out += [f"- **{esc(m)}**: {esc(readings[m])}" for m in o.models if m in readings]
    return "\n".join(out) + "\n"


def overview_html(o: Overview, readings: dict[str, str] | None = None) -> str:
    if not o.headers:
        return ""
    esc = html.escape
    head = "<tr><th>model</th>" + "".join(f"<th>{esc(h)}</th>" for h in o.headers) + \
        "<th>mean rank</th><th>protocols</th></tr>"
    body = "".join(
        "<tr><td>" + esc(m) + "</td>" + "".join(f"<td>{esc(v)}</td>" for v in row)
        + "".join(f"<td>{esc(v)}</td>" for v in _rank_text(rank, n, len(o.headers))) + "</tr>"
        for m, row, rank, n in zip(o.models, o.cells, o.mean_rank, o.counts))
    reading = ("<ul>" + "".join(f"<li><b>{esc(m)}</b>: {esc(readings[m])}</li>" for m in o.models if m in readings)
               + "</ul>") if readings else ""
    return (f'<section id="overview"><h2>Overview</h2><p class="note">{esc(LEGEND)}</p>'
            f"<table>{head}{body}</table>{reading}</section>")


def model_readings(records: list[dict]) -> dict[str, str]:
    """{model name: model_reading} of the first record of each model."""
    out: dict[str, str] = {}
    for r in records:
        model = r.get("model") or {}
        if model.get("name") and model["name"] not in out:
            out[model["name"]] = model_reading(model)
    return out
