"""Leaderboards: result records -> one RunTable (harness.results.run_table) -> CSV / Markdown /
HTML / PNG.

Rows are models. A column is one (protocol, dataset, split, variant, metric) measured
under one protocol fingerprint; a cell is the mean, std and count over seeds of the rows
harness.results.table makes of the records.

Records measured under different fingerprints (a different k, resolution, subset list,
normalisation, ...) are never averaged into one cell: they become separate columns
labelled with the short fingerprint, and a message says they cannot be compared.
``compare(records, strict=True)`` refuses them instead.
"""
from __future__ import annotations

import html
import math
from pathlib import Path
from typing import Iterable

import numpy as np
import pandas as pd

from harness.results import html_assets
from harness.io_utils import atomic_write_text
from harness.results.records import runs_dir as runs_dir_default
from harness.results.protocol_tables import ProtocolTable, protocol_tables
from harness.results.plots import bar_spec, draw_once, fraction_curve_specs, safe_name
from harness.results.run_table import (RunTable, headline_keys, run_table, table_of_folder,
                                       table_of_records)
from harness.results.table import SHORT_FP, IncomparableResultsError, conflict_message, fingerprint_conflicts
from harness.text_table import text_table

# ----------------------------------------------------------------------------- build
def build_leaderboard(records: Iterable[dict] | pd.DataFrame | None = None,
                      runs_dir: str | Path | None = None) -> RunTable:
    """The leaderboard of records (dicts, or a harness.results.records.load_results() frame), or
    of a records folder (``records`` None: ``runs_dir``, default results/runs), as one RunTable
    (harness.results.run_table): rows = models, columns = (protocol, dataset, split, variant,
    metric, fingerprint), cells = mean / std / n over seeds (std: the sample std, 0 for n = 1);
    ``messages`` (fingerprint conflicts, as text), ``conflicts`` (the same as data),
    ``model_info`` (method, arch, ... per row). A folder's table is read from its index's number
    rows, without parsing a record (harness.results.index). ``.frame`` is it as pandas."""
    if records is None:
        return table_of_folder(Path(runs_dir) if runs_dir else runs_dir_default())
    return table_of_records(records)


def pivot(df: pd.DataFrame) -> pd.DataFrame:
    """The leaderboard table of a harness.results.records.load_results() frame: index = model, columns
    (protocol, dataset, split, variant, metric, fingerprint, stat) with stat mean / std / n
    over seeds."""
    return build_leaderboard(df).frame


def compare(records: list[dict], strict: bool = True) -> pd.DataFrame:
    """The leaderboard of ``records``; with ``strict`` a fingerprint conflict is an error
    (IncomparableResultsError) instead of separate columns."""
    conflicts = fingerprint_conflicts(records)
    if strict and conflicts:
        raise IncomparableResultsError(
            "cannot put these records in one leaderboard cell:\n  "
            + "\n  ".join(conflict_message(c) for c in conflicts)
            + "\nCompare only records measured with the same protocol settings, "
              "or call compare(records, strict=False) to see them as separate columns.")
    return build_leaderboard(records)


# ----------------------------------------------------------------------------- views
# Every view takes a RunTable (build_leaderboard's; records are made into one): a caller that
# shows a run several ways builds the RunTable once and passes it to each.


def column_keys(df: RunTable | Iterable[dict]) -> list[tuple]:
    """The (protocol, dataset, split, variant, metric, fingerprint) keys, in table order."""
    return list(run_table(df).keys)


def display_labels(df: RunTable | Iterable[dict]) -> dict[tuple, str]:
    """Column key -> label; the short fingerprint is appended where needed to tell columns apart."""
    return dict(run_table(df).labels)


def format_cell(mean: float, std: float, n: float, digits: int = 2) -> str:
    if mean is None or (isinstance(mean, float) and math.isnan(mean)):
        return ""
    n = int(n) if n == n else 0
    if n > 1:
        return f"{mean:.{digits}f} ± {std:.{digits}f} (n={n})"
    return f"{mean:.{digits}f}"


def _formatted_columns(t: RunTable, keys: list[tuple], digits: int = 2) -> dict[tuple, list[str]]:
    """Column key -> every row's :func:`format_cell` text, column by column."""
    out = {}
    for c in keys:
        j = t.col[c]
        out[c] = [("" if mean != mean else f"{mean:.{digits}f} ± {std:.{digits}f} (n={n})" if n > 1
                   else f"{mean:.{digits}f}") if n > 0 else ""
                  for mean, std, n in zip(t.mean[:, j].tolist(), t.std[:, j].tolist(), t.n[:, j].tolist())]
    return out


def formatted(df: RunTable | Iterable[dict], headline_only: bool = False, digits: int = 2) -> pd.DataFrame:
    """Display table: one string column per column key, cells ``mean ± std (n=k)``."""
    t = run_table(df)
    keys = headline_keys(t) if headline_only else t.keys
    cols = _formatted_columns(t, keys, digits)
    out = pd.DataFrame({t.labels[c]: cols[c] for c in keys}, index=pd.Index(t.models, name="model"))
    out.index.name = "model"
    return out


def random_init_baselines(df: RunTable | Iterable[dict]) -> dict[str, list[str]]:
    """Row -> the random-init rows its deltas are taken against (RunTable.baselines: shared,
    read it without changing it)."""
    return run_table(df).baselines


def random_init_references(df: RunTable | Iterable[dict]) -> dict[str, str]:
    """Row -> its random-init row, for rows that have exactly one (:func:`random_init_baselines`)."""
    return {m: refs[0] for m, refs in random_init_baselines(df).items() if len(refs) == 1}


def baseline_delta(t: RunTable, model: str, key: tuple, baselines: dict[str, list[str]]) -> float | None:
    """A cell's difference to the mean of its row's random-init rows (those with a number in the
    column); None where the row has none. The table's own baselines are a look-up
    (RunTable.baseline_mean); others are averaged here."""
    j = t.col[key]
    if baselines is t.baselines:
        if model not in baselines or np.isnan(t.baseline_mean[t.row[model], j]):
            return None
        return t.mean[t.row[model], j] - t.baseline_mean[t.row[model], j]
    base = [t.mean[t.row[r], j] for r in baselines.get(model, []) if t.n[t.row[r], j] > 0]
    if not base:
        return None
    return t.mean[t.row[model], j] - sum(base) / len(base)


def best_rows(t: RunTable, col: tuple, rows: list[str]) -> set[str]:
    """Rows holding the column's best mean by its metric's direction (harness.metrics: the
    highest, or the lowest for a lower-is-better metric); none when fewer than two rows have a
    number or all of them are equal."""
    j = t.col[col]
    means = {m: t.mean[t.row[m], j] for m in rows if t.n[t.row[m], j] > 0}
    top = t.metric(col).best(means.values())
    best = {m for m, v in means.items() if math.isclose(v, top, rel_tol=0, abs_tol=1e-9)}
    return best if len(means) >= 2 and len(best) < len(means) else set()


def delta_text(t: RunTable, col: tuple, delta: float, digits: int = 2) -> str:
    """A delta to random init as a cell shows it; a lower-is-better metric's says whether it is
    better (lower) or worse, since its sign reads the other way round."""
    metric = t.metric(col)
    text = f"Δ {delta:+.{digits}f}"
    if metric.higher_is_better:
        return text
    d = round(delta, digits)
    return f"{text} ({metric.compare_word(d, 0.0)})" if d else text


def _best_indices(t: RunTable, col: tuple, idx: np.ndarray) -> set[int]:
    """:func:`best_rows` of the rows ``idx`` as row indices, over arrays."""
    j = t.col[col]
    rows = idx[t.n[idx, j] > 0]
    means = t.mean[rows, j]
    means, rows = means[~np.isnan(means)], rows[~np.isnan(means)]
    if len(rows) < 2:
        return set()
    top = means.max() if t.metric(col).higher_is_better else means.min()
    best = np.abs(means - top) <= 1e-9  # as best_rows: math.isclose(v, top, rel_tol=0, abs_tol=1e-9)
    return set(rows[best].tolist()) if best.sum() < len(rows) else set()


def _column_cells(t: RunTable, col: tuple, idx: np.ndarray, best_mark, headline: bool, digits: int) -> list[str]:
    """The cells of one column for the rows ``idx`` (see :func:`_table_cells`), formatted column
    by column: a table of 100,000 records holds some 150,000 cells."""
    j = t.col[col]
    ns = t.n[idx, j].tolist()
    means, stds = t.mean[idx, j].tolist(), t.std[idx, j].tolist()
    best_idx = _best_indices(t, col, idx)
    if headline and t.baselines:
        refs = np.array([t.models[i] in t.baselines for i in idx.tolist()], dtype=bool)
        base = t.baseline_mean[idx, j]
        deltas = np.where(refs & ~np.isnan(base), t.mean[idx, j] - base, np.nan).tolist()
    else:
        deltas = [math.nan] * len(ns)
    plain_delta = t.metric(col).higher_is_better  # delta_text's own text: formatted here, once per column
    cells = []
    for i, mean, std, n, delta in zip(idx.tolist(), means, stds, ns, deltas):
        if not n > 0:
            cells.append("")
            continue
        value = f"{mean:.{digits}f}"
        text = (best_mark(value) if i in best_idx else value) + (
            f" ± {std:.{digits}f} (n={n})" if n > 1 else " (n=1)")
        if delta == delta:
            text += f" Δ {delta:+.{digits}f}" if plain_delta else " " + delta_text(t, col, delta, digits)
        cells.append(text)
    return cells


def _table_cells(t: RunTable, table: ProtocolTable, best_mark, digits: int = 2) -> tuple[list[str], list[list[str]]]:
    """(rows, cells) of one protocol table: ``mean ± std (n=k)`` (``mean (n=1)`` for one seed),
    ``best_mark(text)`` on the best mean of each column, and on headline columns the delta to
    the row's random-init reference (``Δ +1.23``)."""
    rows = t.rows_with(table.columns)
    idx = np.array([t.row[m] for m in rows], dtype=int)
    columns = [_column_cells(t, c, idx, best_mark, table.is_headline(c), digits) for c in table.columns]
    return rows, [list(line) for line in zip(*columns)] if columns else [[] for _ in rows]


def _legend(t: RunTable, best: str) -> str:
    # rows share one list per architecture: read each distinct list once
    lists = {id(rows): rows for rows in random_init_baselines(t).values()}.values()
    refs = sorted({r for rows in lists for r in rows})
    text = f"{best}: the best mean of the column (higher is better)"
    if any(not t.metric(c).higher_is_better for c in t.keys):
        text = f"{best}: the best mean of the column (higher is better; ↓: lower is better, the lowest is best)"
    if len(refs) == 1:
        text += f"; Δ: difference to the random-init row ({refs[0]}) on the headline metric"
    elif refs:
        text += (f"; Δ: difference to the mean of the random-init rows of the row's architecture "
                 f"({', '.join(refs)}) on the headline metric")
    return text


def format_console(df: RunTable | Iterable[dict]) -> str:
    """One block per (protocol, dataset, split): the headline metric's columns (the protocol's
    declared ``headline``), the best marked ``*``, each row's delta to random init; then the
    fingerprint messages."""
    t = run_table(df)
    if t.empty:
        return "no result records found"
    blocks = []
    for table in protocol_tables(t, headline_only=True):
        rows, cells = _table_cells(t, table, best_mark=lambda v: v + "*")
        if not rows:
            continue
        fps = ", ".join(dict.fromkeys(f"@{c[5][:SHORT_FP]}" for c in table.columns))
        body = text_table(["model"] + [table.headers[c] for c in table.columns],
                          [[m] + line for m, line in zip(rows, cells)], right=range(1, len(table.columns) + 1))
        blocks.append(f"== {table.protocol} ==  {table.title}  (fingerprints {fps})\n{body}")
    blocks.append(_legend(t, "*"))
    if t.messages:
        blocks.append("NOT COMPARABLE:\n" + "\n".join(f"- {m}" for m in t.messages))
    return "\n\n".join(blocks)


# ----------------------------------------------------------------------------- writers
def fingerprint_table(df: RunTable | Iterable[dict]) -> pd.DataFrame:
    t = run_table(df)
    rows = [dict(column=t.labels[c], protocol=c[0], dataset=c[1], split=c[2], variant=c[3],
                 metric=c[4], fingerprint=c[5]) for c in t.keys]
    return pd.DataFrame(rows, columns=["column", "protocol", "dataset", "split", "variant", "metric",
                                       "fingerprint"])


LONG_INTERVAL_COLUMNS = ["ci95_low", "ci95_high", "ci_method"]


def long_table(df: RunTable | Iterable[dict]) -> pd.DataFrame:
    """One row per (model, column): numbers with their std, n and fingerprint, then the 95%
    interval (``ci95_low``, ``ci95_high``) and how it was made (``ci_method``): over seeds,
    Student's t with n - 1 degrees of freedom (``t over seeds``); for one seed, a seeded bootstrap
    over the evaluation images where the record keeps per-image statistics (``bootstrap over N
    images, R resamples, seed S``), else empty bounds and ``none: one seed``."""
    t = run_table(df)
    ii, jj = np.nonzero(t.n > 0)  # row-major: model by model, each in column order
    if not len(ii):
        return pd.DataFrame()

    def per_row(values: list) -> np.ndarray:
        return np.array(values + [None], dtype=object)[:-1][ii]  # [None]: strings stay objects

    def per_col(values: list) -> np.ndarray:
        return np.array(values + [None], dtype=object)[:-1][jj]

    info = [t.model_info.get(m) or {} for m in t.models]
    key_parts = dict(zip(("protocol", "dataset", "split", "variant", "metric", "fingerprint"),
                         (per_col([c[k] for c in t.keys]) for k in range(6))))
    return pd.DataFrame(dict(
        model=per_row(list(t.models)), method=per_row([d.get("method") for d in info]),
        arch=per_row([d.get("arch") for d in info]), **key_parts, column=per_col([t.labels[c] for c in t.keys]),
        mean=t.mean[ii, jj], std=t.std[ii, jj], n=t.n[ii, jj].astype(int), ci95_low=t.ci_low[ii, jj],
        ci95_high=t.ci_high[ii, jj], ci_method=t.ci_methods[ii, jj]))


def _md_escape(s: str) -> str:
    return str(s).replace("|", "\\|")


def to_markdown(df: RunTable | Iterable[dict], pairs: list | None = None,
                readings: dict[str, str] | None = None) -> str:
    """The overview (harness.results.overview: a row per model, a column per protocol's headline;
    ``pairs`` say why a cell is empty, ``readings`` how each model was read), then one table per
    (protocol, dataset, split): headline metric first, then the other metrics; the best mean of each
    column in bold; on headline columns each row's delta to random init."""
    from harness.results.overview import build_overview, overview_markdown

    t = run_table(df)
    labels = t.labels
    out = ["# Leaderboard", ""]
    overview = overview_markdown(build_overview(t, pairs), readings)
    if overview:
        out += [overview]
    out += ["One table per protocol and data set, its headline metric first. Cells: mean ± std over "
            "seeds (n = number of seeds). " + _legend(t, "**Bold**") + ".", ""]
    for table in protocol_tables(t):
        rows, cells = _table_cells(t, table, best_mark=lambda v: f"**{v}**")
        fps = ", ".join(dict.fromkeys(f"`{c[5][:SHORT_FP]}`" for c in table.columns))
        out += [f"## {_md_escape(table.protocol)} · {_md_escape(table.title)}", "",
                f"Headline: {table.headline}. Fingerprint {fps}.", "",
                "| model | " + " | ".join(_md_escape(table.headers[c]) for c in table.columns) + " |",
                "|---|" + "---:|" * len(table.columns)]
        out += ["| " + " | ".join([_md_escape(m)] + [v.replace("|", "\\|") for v in line]) + " |"
                for m, line in zip(rows, cells)]
        out.append("")
    if t.messages:
        out += ["## Not comparable", ""] + [f"- {m}" for m in t.messages] + [""]
    out += ["## Fingerprints", "", "| column | fingerprint |", "|---|---|"]
    out += [f"| {_md_escape(labels[c])} | `{c[5]}` |" for c in t.keys]
    return "\n".join(out) + "\n"


def to_html(df: RunTable | Iterable[dict], title: str = "ssl-bench leaderboard") -> str:
    t = run_table(df)
    keys, labels = t.keys, t.labels
    texts = _formatted_columns(t, keys)
    esc = html.escape
    head = ['<tr><th class="sort" data-col="0">model</th>' + "".join(
        f'<th class="sort" data-col="{j + 1}" title="{esc(c[5])}">{esc(labels[c])}</th>'
        for j, c in enumerate(keys)) + "</tr>",
        '<tr class="fp"><th>fingerprint</th>' + "".join(
            f'<th title="{esc(c[5])}"><code>{esc(c[5][:SHORT_FP])}</code></th>' for c in keys) + "</tr>"]
    # column by column over Python floats: no NumPy scalar per cell; a cell's text (digits, ".",
    # "±", "(n=k)", "nan") holds nothing html.escape changes
    columns = [[f'<td data-v="{"" if mean != mean else repr(mean)}">{text}</td>'
                for mean, text in zip(t.mean[:, t.col[c]].tolist(), texts[c])] for c in keys]
    body = ["<tr>" + f'<td data-v="{esc(str(model))}">{esc(str(model))}</td>' + "".join(cells) + "</tr>"
            for model, cells in zip(t.models, zip(*columns) if columns else [()] * len(t.models))]
    msg_html = ("<h2>Not comparable</h2><ul>" + "".join(f"<li>{esc(m)}</li>" for m in t.messages)
                + "</ul>") if t.messages else ""
    fp_rows = "".join(f"<tr><td>{esc(labels[c])}</td><td><code>{esc(c[5])}</code></td></tr>" for c in keys)
    return f"""<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>{esc(title)}</title>
<style>{html_assets.table_stylesheet()}</style></head><body>
<h1>{esc(title)}</h1>
<p>Cells: mean ± std over seeds (n shown when &gt; 1). Click a column header to sort.</p>
<table id="leaderboard"><thead>{''.join(head)}</thead><tbody>{''.join(body)}</tbody></table>
{msg_html}
<h2>Fingerprints</h2><table><tr><th>column</th><th>fingerprint</th></tr>{fp_rows}</table>
<script>{html_assets.sortable_table_script()}</script>
</body></html>
"""


def write_leaderboard(df_or_records: RunTable | Iterable[dict], out_dir: str | Path,
                      extra_sections: list[str] | None = None, pairs: list | None = None,
                      readings: dict[str, str] | None = None) -> dict[str, Path]:
    """Write leaderboard.csv (wide, means), leaderboard_long.csv (mean/std/n/fingerprint per
    cell, then its 95% interval), leaderboard_fingerprints.csv, leaderboard.md, leaderboard.html
    and PNG plots into ``out_dir``. ``extra_sections`` (plain-text blocks, e.g. a suite's margins
    and paper verdicts) are appended to leaderboard.md as preformatted text; ``pairs`` (a run's
    harness.results.pair_status.PairStatus list) adds its failed and not-applicable pairs and fills the
    overview's empty cells; ``readings`` say how each model was read (default: the table's,
    RunTable.readings). Returns {name: path};
    plot names are ``plot_<protocol>`` and ``curve_<file stem>``."""
    t = run_table(df_or_records)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths: dict[str, Path] = {}

    wide = pd.DataFrame({t.labels[c]: t.mean[:, t.col[c]] for c in t.keys}, index=pd.Index(t.models))
    wide.index.name = "model"
    paths["csv"] = atomic_write_text(out / "leaderboard.csv", wide.to_csv())
    paths["long_csv"] = atomic_write_text(out / "leaderboard_long.csv", long_table(t).to_csv(index=False))
    paths["fingerprints_csv"] = atomic_write_text(out / "leaderboard_fingerprints.csv",
                                                  fingerprint_table(t).to_csv(index=False))
    from harness.results.pair_status import markdown_section

    pairs_md = markdown_section(pairs or [])
    md = to_markdown(t, pairs, t.readings if readings is None else readings) + (f"\n{pairs_md}" if pairs_md else "") \
        + "".join(f"\n```\n{block}\n```\n" for block in extra_sections or [])
    paths["md"] = atomic_write_text(out / "leaderboard.md", md)
    paths["html"] = atomic_write_text(out / "leaderboard.html", to_html(t))
    figures = [(f"plot_{protocol}", out / f"{safe_name(protocol)}_bars.png", bar_spec(t, protocol))
               for protocol in dict.fromkeys(c[0] for c in t.keys)]
    figures += [(f"curve_{Path(name).stem}", out / name, spec) for name, spec in fraction_curve_specs(t)]
    figures = [f for f in figures if f[2] is not None]
    draw_once([(path, spec) for _, path, spec in figures])
    paths.update({name: path for name, path, _ in figures})
    return paths


# ----------------------------------------------------------------------------- a run's files
CHECKS = "checks.json"  # beside a run's pairs.json: its suite's checks (margins, paper verdicts) as text


def write_run_leaderboard(table: RunTable, out_dir: str | Path, pairs: list, checks: list[str]) -> dict[str, Path]:
    """A run's leaderboard files, written one way by the run itself and by `ssl-bench leaderboard`
    from its records folder, so that the two are the same bytes: ``table`` (the records' RunTable,
    with its readings and parts without a number), ``pairs`` (the run's PairStatus list, as
    pairs.json keeps it) and ``checks`` (the suite's check blocks, as checks.json keeps them:
    :func:`write_checks`), appended to leaderboard.md."""
    return write_leaderboard(table, out_dir, extra_sections=checks, pairs=list(pairs) + table.no_number)


def write_checks(path: str | Path, checks: list[str]) -> Path:
    """A run's suite check blocks, kept for `ssl-bench leaderboard` to write its leaderboard again."""
    import json

    return atomic_write_text(Path(path), json.dumps(list(checks), indent=1) + "\n")


def read_checks(path: str | Path) -> list[str]:
    """The check blocks a run kept (:func:`write_checks`); [] where there is no such file."""
    import json

    path = Path(path)
    return [str(block) for block in json.loads(path.read_text())] if path.is_file() else []
