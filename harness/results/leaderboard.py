"""Leaderboards: result records -> one pandas table -> CSV / Markdown / HTML / PNG.

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
import re
from collections import defaultdict
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

import numpy as np
import pandas as pd

from harness.results import html_assets
from harness.io_utils import atomic_write, atomic_write_text
from harness.protocol_info import declared_headline, headline_metric, variant_text
from harness.results.records import iter_records
from harness.variants import fraction_value, parse_variant, variant_label
from harness.results.table import (SHORT_FP, IncomparableResultsError, column_label, conflict_message,
                                   disambiguate_data, disambiguate_models, fingerprint_conflicts, flatten_records)
from harness.text_table import text_table

# Column levels of the table returned by build_leaderboard.
LEVELS = ("protocol", "dataset", "split", "variant", "metric", "fingerprint", "stat")
STATS = ("mean", "std", "n")


# ----------------------------------------------------------------------------- helpers
def _column_sort_key(col: tuple) -> tuple:
    """Table order: protocol, dataset, split, then variant values numerically (fraction
    1/128 < 1/8 < 1), metric, fingerprint."""
    var = []
    for k, v in parse_variant(col[3]).items():
        num = fraction_value(v)
        var.append((k, 0 if num is not None else 1, num if num is not None else 0.0, v))
    return (col[0], col[1], col[2], tuple(var), col[4], col[5])


# ----------------------------------------------------------------------------- build
def build_leaderboard(records: list[dict] | pd.DataFrame | None = None,
                      runs_dir: str | Path | None = None) -> pd.DataFrame:
    """Pivot records (or a harness.results.records.load_results() frame) into a table: index = model,
    columns = MultiIndex ``LEVELS``.

    For every (protocol, dataset, split, variant, metric, fingerprint) there are three
    columns, stat = mean / std / n (over seeds; std is the sample std, 0 for n = 1).
    ``df.attrs`` holds ``messages`` (fingerprint conflicts, as text), ``conflicts``
    (the same as data), ``models`` (method, arch, ... per row) and ``fingerprints``
    ({column label: full fingerprint}).
    """
    if records is None:
        records = list(iter_records(Path(runs_dir) if runs_dir else None))
    flat = disambiguate_data(disambiguate_models(flatten_records(records)))
    conflicts = fingerprint_conflicts(flat)
    if flat.empty:
        df = pd.DataFrame(index=pd.Index([], name="model"),
                          columns=pd.MultiIndex.from_tuples([], names=LEVELS))
        df.attrs.update(messages=[], conflicts=[], models={}, fingerprints={})
        return df
    # A re-run of the same (model, column, seed) under a new record id: keep the newest.
    flat = flat.sort_values("created", na_position="first", kind="stable").drop_duplicates(
        ["model", "protocol", "dataset", "split", "variant", "metric", "fingerprint", "seed"], keep="last")
    col_keys = ["protocol", "dataset", "split", "variant", "metric", "fingerprint"]
    agg = flat.groupby(["model"] + col_keys, sort=True)["value"].agg(
        mean="mean", std=lambda s: float(s.std(ddof=1)) if len(s) > 1 else 0.0, n="count")
    wide = agg.unstack(col_keys)  # columns: (stat, *col_keys)
    wide.columns = wide.columns.reorder_levels(list(range(1, 7)) + [0])
    wide.columns.names = list(LEVELS)
    order = sorted({c[:6] for c in wide.columns}, key=_column_sort_key)
    wide = wide.reindex(columns=pd.MultiIndex.from_tuples(
        [c + (s,) for c in order for s in STATS], names=LEVELS))
    models = {}
    for name, grp in flat.groupby("model"):
        first = grp.iloc[0]
        models[name] = {k: (None if pd.isna(first[k]) else first[k])
                        for k in ("method", "context", "arch", "pretrain_data", "epochs", "sha")}
    wide.attrs.update(
        messages=[conflict_message(c) for c in conflicts], conflicts=conflicts, models=models,
        fingerprints={column_label(c): c[5] for c in order})
    return wide


def pivot(df: pd.DataFrame) -> pd.DataFrame:
    """The leaderboard table of a harness.results.records.load_results() frame: index = model, columns
    (protocol, dataset, split, variant, metric, fingerprint, stat) with stat mean / std / n
    over seeds."""
    return build_leaderboard(df)


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
def column_keys(df: pd.DataFrame) -> list[tuple]:
    """The (protocol, dataset, split, variant, metric, fingerprint) keys, in table order."""
    seen, out = set(), []
    for c in df.columns:
        if c[:6] not in seen:
            seen.add(c[:6])
            out.append(c[:6])
    return out


def _conflicted(df: pd.DataFrame) -> set[tuple]:
    """Column keys (without fingerprint) that exist under several fingerprints."""
    count: dict[tuple, int] = defaultdict(int)
    for c in column_keys(df):
        count[c[:5]] += 1
    return {k for k, v in count.items() if v > 1}


def display_labels(df: pd.DataFrame) -> dict[tuple, str]:
    """Column key -> label; the short fingerprint is appended where needed to tell columns apart."""
    conflicted = _conflicted(df)
    return {c: column_label(c, with_fp=c[:5] in conflicted) for c in column_keys(df)}


def format_cell(mean: float, std: float, n: float, digits: int = 2) -> str:
    if mean is None or (isinstance(mean, float) and math.isnan(mean)):
        return ""
    n = int(n) if n == n else 0
    if n > 1:
        return f"{mean:.{digits}f} ± {std:.{digits}f} (n={n})"
    return f"{mean:.{digits}f}"


def formatted(df: pd.DataFrame, headline_only: bool = False, digits: int = 2) -> pd.DataFrame:
    """Display table: one string column per column key, cells ``mean ± std (n=k)``."""
    labels = display_labels(df)
    keys = column_keys(df)
    if headline_only:
        by_group: dict[tuple, list[str]] = defaultdict(list)
        for c in keys:
            by_group[(c[0], c[1], c[2], c[3], c[5])].append(c[4])
        keys = [c for c in keys if c[4] == headline_metric(c[0], by_group[(c[0], c[1], c[2], c[3], c[5])])]
    out = pd.DataFrame(index=df.index)
    for c in keys:
        out[labels[c]] = [format_cell(m, s, n, digits) for m, s, n in
                          zip(df[c + ("mean",)], df[c + ("std",)], df[c + ("n",)])]
    out.index.name = "model"
    return out


# ----------------------------------------------------------------------------- per-protocol tables
@dataclass
class ProtocolTable:
    """The columns of one (protocol, dataset, split): headline metric first, then the others."""

    protocol: str
    dataset: str
    split: str
    headline: str | None  # the headline metric's name
    columns: list[tuple]  # column keys (protocol, dataset, split, variant, metric, fingerprint)
    headers: dict[tuple, str]  # column key -> readable header ("top1 k=20 cls")

    @property
    def title(self) -> str:
        return f"{self.dataset}/{self.split}" if self.split else self.dataset

    def is_headline(self, col: tuple) -> bool:
        return col[4] == self.headline


def protocol_tables(df: pd.DataFrame, headline_only: bool = False) -> list[ProtocolTable]:
    """The leaderboard split into one table per (protocol, dataset, split), in table order.
    Headers read metric then variant as the protocol declares it (``VARIANT_LABELS``), with the
    short fingerprint where one (protocol, dataset, split, variant, metric) has several.
    ``headline_only``: the headline metric's columns alone, and of a sweep that also reports its
    best (``lr=<value>`` and ``lr=best``) the best alone (the console's view)."""
    conflicted = _conflicted(df)
    groups: dict[tuple, list[tuple]] = defaultdict(list)
    for c in column_keys(df):
        groups[c[:3]].append(c)
    tables = []
    for (protocol, dataset, split), keys in groups.items():
        headline = headline_metric(protocol, dict.fromkeys(c[4] for c in keys))
        metric_order = {m: i for i, m in enumerate(dict.fromkeys(c[4] for c in keys))}
        keys = sorted(keys, key=lambda c: (c[4] != headline, metric_order[c[4]]))  # stable: variants keep order
        if headline_only:
            keys = [c for c in keys if c[4] == headline]
            best = {(c[4], c[5]) for c in keys if parse_variant(c[3]).get("lr") == "best"}
            keys = [c for c in keys if (c[4], c[5]) not in best or parse_variant(c[3]).get("lr") in (None, "best")]
        headers = {}
        for c in keys:
            text = " ".join(t for t in (c[4], variant_text(protocol, parse_variant(c[3]))) if t)
            headers[c] = f"{text} @{c[5][:SHORT_FP]}" if c[:5] in conflicted else text
        tables.append(ProtocolTable(protocol, dataset, split, headline, keys, headers))
    return tables


def random_init_baselines(df: pd.DataFrame) -> dict[str, list[str]]:
    """Row -> the random-init rows its deltas are taken against (their mean). A random-init row
    is one whose records say so (context ``random_init``, harness.context); only rows of a
    method's or an imported checkpoint's model (no context) get them: every random-init row of
    their architecture (several init seeds show the baseline's own noise), else the only one
    there is. The other context rows (chance, pixels, supervised) are references too."""
    models = df.attrs.get("models", {})
    kinds = {m: (models.get(m) or {}).get("context") for m in df.index}
    refs = [m for m in df.index if kinds[m] == "random_init"]
    out = {}
    for m in df.index:
        if kinds[m] is not None or not refs:
            continue
        same_arch = [r for r in refs if (models.get(r) or {}).get("arch") == (models.get(m) or {}).get("arch")]
        chosen = same_arch or (refs if len(refs) == 1 else [])
        if chosen:
            out[m] = chosen
    return out


def random_init_references(df: pd.DataFrame) -> dict[str, str]:
    """Row -> its random-init row, for rows that have exactly one (:func:`random_init_baselines`)."""
    return {m: refs[0] for m, refs in random_init_baselines(df).items() if len(refs) == 1}


def _best_rows(df: pd.DataFrame, col: tuple, rows: list[str]) -> set[str]:
    """Rows holding the column's highest mean (every metric here is higher-is-better); none
    when fewer than two rows have a number or all of them are equal."""
    means = {m: df.at[m, col + ("mean",)] for m in rows if df.at[m, col + ("n",)] > 0}
    top = max(means.values(), default=math.nan)
    best = {m for m, v in means.items() if math.isclose(v, top, rel_tol=0, abs_tol=1e-9)}
    return best if len(means) >= 2 and len(best) < len(means) else set()


def _table_cells(df: pd.DataFrame, table: ProtocolTable, best_mark, digits: int = 2) -> tuple[list[str], list[list[str]]]:
    """(rows, cells) of one protocol table: ``mean ± std (n=k)`` (``mean (n=1)`` for one seed),
    ``best_mark(text)`` on the best mean of each column, and on headline columns the delta to
    the row's random-init reference (``Δ +1.23``)."""
    rows = [m for m in df.index if any(df.at[m, c + ("n",)] > 0 for c in table.columns)]
    baselines = random_init_baselines(df)
    best = {c: _best_rows(df, c, rows) for c in table.columns}
    cells = []
    for m in rows:
        line = []
        for c in table.columns:
            mean, std, n = df.at[m, c + ("mean",)], df.at[m, c + ("std",)], df.at[m, c + ("n",)]
            if not n > 0:
                line.append("")
                continue
            value = f"{mean:.{digits}f}"
            text = (best_mark(value) if m in best[c] else value) + (
                f" ± {std:.{digits}f} (n={int(n)})" if n > 1 else " (n=1)")
            base = [df.at[r, c + ("mean",)] for r in baselines.get(m, []) if df.at[r, c + ("n",)] > 0]
            if table.is_headline(c) and base:
                text += f" Δ {mean - sum(base) / len(base):+.{digits}f}"
            line.append(text)
        cells.append(line)
    return rows, cells


def _legend(df: pd.DataFrame, best: str) -> str:
    refs = sorted({r for rows in random_init_baselines(df).values() for r in rows})
    text = f"{best}: the best mean of the column (higher is better)"
    if len(refs) == 1:
        text += f"; Δ: difference to the random-init row ({refs[0]}) on the headline metric"
    elif refs:
        text += (f"; Δ: difference to the mean of the random-init rows of the row's architecture "
                 f"({', '.join(refs)}) on the headline metric")
    return text


def format_console(df: pd.DataFrame) -> str:
    """One block per (protocol, dataset, split): the headline metric's columns (the protocol's
    ``HEADLINE_METRIC``), the best marked ``*``, each row's delta to random init; then the
    fingerprint messages."""
    if df.empty:
        return "no result records found"
    blocks = []
    for table in protocol_tables(df, headline_only=True):
        rows, cells = _table_cells(df, table, best_mark=lambda v: v + "*")
        if not rows:
            continue
        fps = ", ".join(dict.fromkeys(f"@{c[5][:SHORT_FP]}" for c in table.columns))
        body = text_table(["model"] + [table.headers[c] for c in table.columns],
                          [[m] + line for m, line in zip(rows, cells)], right=range(1, len(table.columns) + 1))
        blocks.append(f"== {table.protocol} ==  {table.title}  (fingerprints {fps})\n{body}")
    blocks.append(_legend(df, "*"))
    messages = df.attrs.get("messages") or []
    if messages:
        blocks.append("NOT COMPARABLE:\n" + "\n".join(f"- {m}" for m in messages))
    return "\n\n".join(blocks)


# ----------------------------------------------------------------------------- writers
def fingerprint_table(df: pd.DataFrame) -> pd.DataFrame:
    labels = display_labels(df)
    rows = [dict(column=labels[c], protocol=c[0], dataset=c[1], split=c[2], variant=c[3],
                 metric=c[4], fingerprint=c[5]) for c in column_keys(df)]
    return pd.DataFrame(rows, columns=["column", "protocol", "dataset", "split", "variant", "metric",
                                       "fingerprint"])


def long_table(df: pd.DataFrame) -> pd.DataFrame:
    """One row per (model, column): numbers with their std, n and fingerprint."""
    labels = display_labels(df)
    models = df.attrs.get("models", {})
    rows = []
    for model in df.index:
        info = models.get(model, {})
        for c in column_keys(df):
            n = df.at[model, c + ("n",)]
            if not n == n or n == 0:
                continue
            rows.append(dict(model=model, method=info.get("method"), arch=info.get("arch"),
                             protocol=c[0], dataset=c[1], split=c[2], variant=c[3], metric=c[4],
                             fingerprint=c[5], column=labels[c], mean=df.at[model, c + ("mean",)],
                             std=df.at[model, c + ("std",)], n=int(n)))
    return pd.DataFrame(rows)


def _md_escape(s: str) -> str:
    return str(s).replace("|", "\\|")


def to_markdown(df: pd.DataFrame) -> str:
    """One table per (protocol, dataset, split): headline metric first, then the other metrics;
    the best mean of each column in bold; on headline columns each row's delta to random init."""
    labels = display_labels(df)
    out = ["# Leaderboard", "",
           "One table per protocol and data set, its headline metric first. Cells: mean ± std over "
           "seeds (n = number of seeds). " + _legend(df, "**Bold**") + ".", ""]
    for table in protocol_tables(df):
        rows, cells = _table_cells(df, table, best_mark=lambda v: f"**{v}**")
        fps = ", ".join(dict.fromkeys(f"`{c[5][:SHORT_FP]}`" for c in table.columns))
        out += [f"## {_md_escape(table.protocol)} · {_md_escape(table.title)}", "",
                f"Headline: {table.headline}. Fingerprint {fps}.", "",
                "| model | " + " | ".join(_md_escape(table.headers[c]) for c in table.columns) + " |",
                "|---|" + "---:|" * len(table.columns)]
        out += ["| " + " | ".join(_md_escape(v) for v in [m] + line) + " |" for m, line in zip(rows, cells)]
        out.append("")
    messages = df.attrs.get("messages") or []
    if messages:
        out += ["## Not comparable", ""] + [f"- {m}" for m in messages] + [""]
    keys = column_keys(df)
    out += ["## Fingerprints", "", "| column | fingerprint |", "|---|---|"]
    out += [f"| {_md_escape(labels[c])} | `{c[5]}` |" for c in keys]
    return "\n".join(out) + "\n"


def to_html(df: pd.DataFrame, title: str = "ssl-bench leaderboard") -> str:
    keys = column_keys(df)
    labels = display_labels(df)
    table = formatted(df)
    esc = html.escape
    head = ['<tr><th class="sort" data-col="0">model</th>' + "".join(
        f'<th class="sort" data-col="{j + 1}" title="{esc(c[5])}">{esc(labels[c])}</th>'
        for j, c in enumerate(keys)) + "</tr>",
        '<tr class="fp"><th>fingerprint</th>' + "".join(
            f'<th title="{esc(c[5])}"><code>{esc(c[5][:SHORT_FP])}</code></th>' for c in keys) + "</tr>"]
    body = []
    for model in table.index:
        cells = [f'<td data-v="{esc(str(model))}">{esc(str(model))}</td>']
        for c in keys:
            mean = df.at[model, c + ("mean",)]
            v = "" if mean != mean else repr(float(mean))
            cells.append(f'<td data-v="{v}">{esc(table.at[model, labels[c]])}</td>')
        body.append("<tr>" + "".join(cells) + "</tr>")
    messages = df.attrs.get("messages") or []
    msg_html = ("<h2>Not comparable</h2><ul>" + "".join(f"<li>{esc(m)}</li>" for m in messages)
                + "</ul>") if messages else ""
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


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name).strip("_")


def plot_protocol_bars(df: pd.DataFrame, protocol: str, path: Path) -> Path | None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = display_labels(df)
    table = formatted(df, headline_only=True)  # picks the headline columns
    keys = [c for c in column_keys(df) if c[0] == protocol and labels[c] in table.columns]
    if not keys:
        return None
    models = [m for m in df.index if any(df.at[m, c + ("n",)] > 0 for c in keys)]
    fig, ax = plt.subplots(figsize=(max(6, 1.2 * len(keys) * max(1, len(models)) * 0.35 + 3), 4.5))
    width = 0.8 / max(1, len(models))
    x = np.arange(len(keys))
    for i, m in enumerate(models):
        means = [df.at[m, c + ("mean",)] for c in keys]
        stds = [df.at[m, c + ("std",)] for c in keys]
        ax.bar(x + (i - (len(models) - 1) / 2) * width, means, width, yerr=stds, capsize=2, label=m)
    ax.set_xticks(x)
    ax.set_xticklabels([labels[c].split(" | ", 1)[1] for c in keys], rotation=20, ha="right", fontsize=8)
    ax.set_ylabel(keys[0][4])
    ax.set_title(protocol)
    ax.legend(fontsize=7)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, lambda p: fig.savefig(p, format="png", dpi=110))
    plt.close(fig)
    return path


def plot_fraction_curves(df: pd.DataFrame, out_dir: Path, protocol: str | None = None) -> list[Path]:
    """Headline metric vs training fraction (log x), one line per model; one figure per
    (protocol, dataset, split, other variant values, metric, fingerprint) whose columns have a
    ``fraction`` variant (dense NN's subsets); ``protocol``: only that protocol's."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    groups: dict[tuple, list[tuple[float, tuple]]] = defaultdict(list)
    for c in column_keys(df):
        if protocol is not None and c[0] != protocol:
            continue
        if c[4].lower() != (declared_headline(c[0]) or c[4]).lower():
            continue
        var = parse_variant(c[3])
        frac = fraction_value(var.pop("fraction", None))
        if frac is None:
            continue
        groups[(c[0], c[1], c[2], variant_label(var), c[4], c[5])].append((frac, c))
    paths = []
    multi_fp = len({g[:5] for g in groups}) < len(groups)
    for (protocol, dataset, split, rest, metric, fp), pts in sorted(groups.items()):
        pts.sort()
        fig, ax = plt.subplots(figsize=(6, 4.2))
        for m in df.index:
            xs, ys, es = [], [], []
            for frac, c in pts:
                if df.at[m, c + ("n",)] > 0:
                    xs.append(frac)
                    ys.append(df.at[m, c + ("mean",)])
                    es.append(df.at[m, c + ("std",)])
            if xs:
                ax.errorbar(xs, ys, yerr=es, marker="o", capsize=2, label=m)
        ax.set_xscale("log")
        ax.set_xlabel("training fraction")
        ax.set_ylabel(metric)
        ticks = [f for f, _ in pts]
        ax.set_xticks(ticks)
        ax.set_xticklabels([str(Fraction(t).limit_denominator(1024)) for t in ticks])
        ax.minorticks_off()
        ax.set_title(" ".join(t for t in (protocol, f"{dataset}/{split}", rest, f"@{fp[:SHORT_FP]}") if t))
        ax.legend(fontsize=7)
        fig.tight_layout()
        name = f"{protocol}_{dataset}_{split}" + (f"_{rest}" if rest else "") + \
               (f"_{fp[:SHORT_FP]}" if multi_fp else "") + "_fraction.png"
        path = out_dir / _safe(name)
        atomic_write(path, lambda p: fig.savefig(p, format="png", dpi=110))
        plt.close(fig)
        paths.append(path)
    return paths


def write_leaderboard(df_or_records: pd.DataFrame | list[dict], out_dir: str | Path,
                      extra_sections: list[str] | None = None) -> dict[str, Path]:
    """Write leaderboard.csv (wide, means), leaderboard_long.csv (mean/std/n/fingerprint per
    cell), leaderboard_fingerprints.csv, leaderboard.md, leaderboard.html and PNG plots into ``out_dir``.
    ``extra_sections`` (plain-text blocks, e.g. a suite's margins and paper verdicts) are appended
    to leaderboard.md as preformatted text. Returns {name: path}; plot names are
    ``plot_<protocol>`` and ``curve_<file stem>``."""
    df = df_or_records if isinstance(df_or_records, pd.DataFrame) else build_leaderboard(list(df_or_records))
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    labels = display_labels(df)
    paths: dict[str, Path] = {}

    wide = pd.DataFrame({labels[c]: df[c + ("mean",)] for c in column_keys(df)}, index=df.index)
    wide.index.name = "model"
    paths["csv"] = atomic_write_text(out / "leaderboard.csv", wide.to_csv())
    paths["long_csv"] = atomic_write_text(out / "leaderboard_long.csv", long_table(df).to_csv(index=False))
    paths["fingerprints_csv"] = atomic_write_text(out / "leaderboard_fingerprints.csv",
                                                  fingerprint_table(df).to_csv(index=False))
    md = to_markdown(df) + "".join(f"\n```\n{block}\n```\n" for block in extra_sections or [])
    paths["md"] = atomic_write_text(out / "leaderboard.md", md)
    paths["html"] = atomic_write_text(out / "leaderboard.html", to_html(df))
    for protocol in dict.fromkeys(c[0] for c in column_keys(df)):
        p = plot_protocol_bars(df, protocol, out / f"{_safe(protocol)}_bars.png")
        if p:
            paths[f"plot_{protocol}"] = p
    for p in plot_fraction_curves(df, out):
        paths[f"curve_{p.stem}"] = p
    return paths
