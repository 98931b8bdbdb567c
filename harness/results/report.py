"""`ssl-bench report`: the result records as one self-contained HTML page.

One file, readable offline: CSS and JavaScript inline (harness.results.html_assets, the same as
leaderboard.html's), plots embedded as SVG data URIs, no request leaves the page. It shows

- one section per protocol: its headline metric (the ``headline`` of the protocol's declaration) per
  model and variant as ``mean ± std (n)``, the best value of each column marked, the
  difference to the random-init baseline (models whose method is ``random_init``), the
  other metrics in a folded table, and curves of the headline metric against every
  numeric variant key that takes several values (e.g. mIoU vs training fraction, top-1 vs k);
- a provenance panel per row: checkpoint, sha256, weights key, protocol preset, settings and
  fingerprint, the checkpoint's training config when its .json is readable, git commit,
  device, dates and record ids;
- a sweeps section: every value of each swept setting the records keep (harness.results.sweeps),
  not only the best;
- a paper section: the published numbers (results/paper) beside the records of the zoo
  checkpoints they name, with delta and verdict (harness.paper.verdict.compare_cells); records
  measured under other settings than the table's are refused, as the leaderboard refuses
  to mix fingerprints;
- the fingerprint conflicts the leaderboard reports.

Every table sorts by a click on a column header; the filter box hides the rows (models,
paper cells) whose text does not contain what is typed.
"""
from __future__ import annotations

import base64
import datetime as _dt
import html
import io
import json
import math
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

import pandas as pd

from harness.paper.verdict import all_paper_cells
from harness.results import html_assets
from harness.results.leaderboard import (baseline_delta, build_leaderboard, format_cell,
                                         random_init_baselines)
from harness.results.overview import build_overview, model_reading, overview_html
from harness.results.pair_status import html_section, read_pairs
from harness.results.panels import read_index
from harness.results.plots import PLOT_MODELS, axis_label, plot_selection
from harness.metrics import Metric
from harness.protocol_info import declared_headline, headline_metric, metric_of
from harness.results.index import is_number, weights_label
from harness.results.records import runs_dir
from harness.results.run_table import RunTable, run_table, table_of_folder, table_of_records
from harness.results.sweeps import sweeps_section
from harness.variants import fraction_value, variant_label
from harness.results.table import SHORT_FP

RANDOM_INIT = "random_init"  # ModelHandle.random_init's method: the baseline of the deltas
esc = html.escape


# ----------------------------------------------------------------------------- data
@dataclass
class Group:
    """One table of a protocol section: a (dataset, split) and its headline columns."""
    protocol: str
    dataset: str
    split: str
    metric: str
    keys: list[tuple]  # leaderboard column keys (protocol, dataset, split, variant, metric, fp)
    models: list[str]


def headline_groups(df: RunTable) -> list[Group]:
    """The headline columns of the leaderboard, grouped by (protocol, dataset, split)."""
    t = run_table(df)
    metrics: dict[tuple, list[str]] = defaultdict(list)
    for c in t.keys:
        metrics[(c[0], c[1], c[2], c[3], c[5])].append(c[4])
    groups: dict[tuple, list[tuple]] = defaultdict(list)
    for c in t.keys:
        if c[4] == headline_metric(c[0], metrics[(c[0], c[1], c[2], c[3], c[5])]):
            groups[(c[0], c[1], c[2])].append(c)
    return [Group(protocol, dataset, split, cols[0][4], cols, t.rows_with(cols))
            for (protocol, dataset, split), cols in groups.items()]


def _fmt_num(v: Any, digits: int = 2) -> str:
    return "" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:.{digits}f}"


# ----------------------------------------------------------------------------- plots
def _svg_uri(fig) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="svg", metadata={"Date": None}, bbox_inches="tight")  # an outside legend kept
    return "data:image/svg+xml;base64," + base64.b64encode(buf.getvalue()).decode("ascii")


MIN_CURVE_POINTS = 3  # two values of a key are a segment, not a curve: the table shows them


def curve_specs(df: RunTable, group: Group) -> list[dict]:
    """The curves of a group: for each variant key whose values are all numbers and take at
    least ``MIN_CURVE_POINTS`` values, one figure per (other variant values, fingerprint)."""
    t = run_table(df)
    variants = {c: t.variants[c] for c in group.keys}
    names = sorted({k for v in variants.values() for k in v})
    specs = []
    for key in names:
        pts: dict[tuple, list[tuple[float, str, tuple]]] = defaultdict(list)
        for c, var in variants.items():
            if key not in var:
                continue
            x = fraction_value(var[key])
            if x is None:
                pts = {}
                break
            rest = variant_label({k: v for k, v in var.items() if k != key})
            pts[(rest, c[5])].append((x, var[key], c))
        for (rest, fp), p in sorted(pts.items()):
            if len({x for x, _, _ in p}) < MIN_CURVE_POINTS:
                continue
            specs.append({"key": key, "rest": rest, "fp": fp, "points": sorted(p)})
    return specs


def plot_curve(df: RunTable, group: Group, spec: dict, multi_fp: bool) -> tuple[str, str]:
    """(title, SVG data URI) of one curve: headline metric vs one variant key, a line per model
    (past ``PLOT_MODELS`` models, the best by mean over the curve's columns), the
    legend beside the axes."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    t = run_table(df)
    xs_all = [x for x, _, _ in spec["points"]]
    models, note = plot_selection(t, [c for _, _, c in spec["points"]], PLOT_MODELS)
    title = f"{group.metric} vs {spec['key']}" + (f" ({spec['rest']})" if spec["rest"] else "") + \
        (f" @{spec['fp'][:SHORT_FP]}" if multi_fp else "") + (f", {note}" if note else "")
    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": "ssl-bench", "font.size": 9}):
        fig, ax = plt.subplots(figsize=(5.2, 3.4))
        for m in models:
            r = t.row[m]
            xs, ys, es = [], [], []
            for x, _, c in spec["points"]:
                j = t.col[c]
                if t.n[r, j] > 0:
                    xs.append(x)
                    ys.append(t.mean[r, j])
                    es.append(t.std[r, j])
            if xs:
                ax.errorbar(xs, ys, yerr=es, marker="o", ms=4, capsize=2, label=m)
        if min(xs_all) > 0 and max(xs_all) / min(xs_all) >= 8:
            ax.set_xscale("log")
        ax.set_xticks(xs_all)
        ax.set_xticklabels([label if "/" in str(label) else f"{x:g}" for x, label, _ in spec["points"]])
        ax.minorticks_off()
        ax.set_xlabel(spec["key"])
        ax.set_ylabel(axis_label(t.metric(spec["points"][0][2])))
        ax.set_title(f"{group.protocol} {group.dataset}/{group.split}: {title}", fontsize=9)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0, frameon=False)
        fig.tight_layout()
        uri = _svg_uri(fig)
        plt.close(fig)
    return title, uri


# ----------------------------------------------------------------------------- provenance
def _short(v: Any, limit: int = 12) -> Any:
    """Settings for display: long lists (per-class IoUs, subset lists) become a count."""
    if isinstance(v, list) and len(v) > limit:
        return f"[{len(v)} values]"
    if isinstance(v, dict):
        return {k: _short(x, limit) for k, x in v.items()}
    return v


def _checkpoint_config(path: str | None) -> dict | None:
    """The training config in a harness checkpoint's .json, when the file is there."""
    if not path:
        return None
    meta = Path(path).with_suffix(".json")
    try:
        data = json.loads(meta.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict):
        return None
    return {k: data[k] for k in ("config_fingerprint", "config", "trained_on", "created", "steps")
            if k in data}


def provenance(records: list[dict]) -> dict[str, Any]:
    """What the panel of one row shows, from the records behind it."""
    def values(get) -> list:
        out = []
        for r in records:
            try:
                v = get(r)
            except (KeyError, TypeError, AttributeError):
                v = None
            if v not in (None, "") and v not in out:
                out.append(v)
        return out

    model = lambda k: values(lambda r: r["model"].get(k))  # noqa: E731
    proto = lambda k: values(lambda r: r["protocol"].get(k))  # noqa: E731
    cost = lambda k: values(lambda r: r["cost"].get(k))  # noqa: E731
    prov = lambda k: values(lambda r: r["provenance"].get(k))  # noqa: E731
    created = sorted(values(lambda r: r["created"]))
    commits = [f"{c}{' (uncommitted changes)' if d else ''}" for c, d in
               dict.fromkeys((r.get("provenance", {}).get("git_commit"), r.get("provenance", {}).get("dirty"))
                             for r in records if r.get("provenance", {}).get("git_commit"))]
    params = values(lambda r: json.dumps(_short(r["protocol"].get("params") or {}), sort_keys=True, default=str))
    ckpt_cfg = next((c for c in (_checkpoint_config(p) for p in model("checkpoint")) if c), None)
    wall = [float(r.get("cost", {}).get("wall_s")) for r in records
            if isinstance(r.get("cost", {}).get("wall_s"), (int, float))]
    return {
        "checkpoint": model("checkpoint"), "sha256": model("checkpoint_sha256"),
        "weights_key": model("weights_key"), "init_seed": model("init_seed"),
        "method": model("method"), "arch": model("arch"), "pretrain_data": model("pretrain_data"),
        "epochs": model("epochs"), "steps": model("steps"),
        "preset": proto("preset"), "fingerprint": proto("fingerprint"), "data_root": proto("data_root"),
        "params": params, "checkpoint_config": ckpt_cfg,
        "commit": commits, "harness": prov("harness_version"), "torch": prov("torch"), "host": prov("host"),
        "device": cost("device"), "gpu": cost("gpu"), "precision": cost("precision"),
        "world_size": cost("world_size"),
        "date": [created[0], created[-1]] if created else [],
        "wall_s": round(sum(wall), 3) if wall else None,
        "records": [r.get("id") for r in records],
        "reading": values(lambda r: model_reading(r["model"])),
    }


def _prov_html(p: dict[str, Any]) -> str:
    def line(label: str, vals: Any, code: bool = False) -> str:
        if vals in (None, [], ""):
            return ""
        vals = vals if isinstance(vals, list) else [vals]
        vals = [f"{v:.6g}" if isinstance(v, float) else v for v in vals]
        text = ", ".join(f"<code>{esc(str(v))}</code>" if code else esc(str(v)) for v in vals)
        return f"<dt>{esc(label)}</dt><dd>{text}</dd>"

    date = " … ".join(p["date"]) if len(set(p["date"])) > 1 else (p["date"][0] if p["date"] else "")
    parts = [
        line("read as (source · normalisation · readout)", p.get("reading")),
        line("checkpoint", p["checkpoint"], True), line("sha256", p["sha256"], True),
        line("weights key", [k for k in p["weights_key"] if k not in p["sha256"]], True),
        line("init seed", p["init_seed"]), line("method / arch", [f"{a} / {b}" for a, b in
                                                                 zip(p["method"] or ["?"], p["arch"] or ["?"])]),
        line("pretraining data", p["pretrain_data"]), line("epochs", p["epochs"]), line("steps", p["steps"]),
        line("protocol preset", p["preset"]), line("fingerprint", p["fingerprint"], True),
        line("data root", p["data_root"], True), line("git commit", p["commit"], True),
        line("harness / torch", [f"{h} / {t}" for h, t in zip(p["harness"] or ["?"], p["torch"] or ["?"])]),
        line("device", p["device"]), line("gpu", p["gpu"]), line("precision", p["precision"]),
        line("processes", p["world_size"]), line("host", p["host"]), line("date", date),
        line("wall time (s, all records)", p["wall_s"]),
    ]
    body = "<dl>" + "".join(parts) + "</dl>"
    body += "<details><summary>protocol settings</summary>" + "".join(
        f"<pre>{esc(json.dumps(json.loads(s), indent=1))}</pre>" for s in p["params"]) + "</details>"
    if p["checkpoint_config"]:
        body += ("<details><summary>checkpoint training config</summary><pre>"
                 + esc(json.dumps(p["checkpoint_config"], indent=1, default=str)) + "</pre></details>")
    body += "<details><summary>records (" + str(len(p["records"])) + ")</summary><p>" + ", ".join(
        f"<code>{esc(str(r))}.json</code>" for r in p["records"]) + "</p></details>"
    return body


# ----------------------------------------------------------------------------- paper
def _verdict_class(v: str) -> str:
    if v.startswith("ok"):
        return "ok"
    if v.startswith("DIFFERS"):
        return "differs"
    return "none"


# ----------------------------------------------------------------------------- HTML
def _th_sort(col: int, label: str, title: str = "", cls: str = "") -> str:
    t = f' title="{esc(title)}"' if title else ""
    return f'<th class="sort {cls}" data-col="{col}"{t}>{label}</th>'


def _interval_html(t: RunTable, i: int, j: int) -> str:
    """A cell's 95% interval: over seeds (n > 1), bootstrapped over the evaluation images (one
    seed, a record with per-image statistics); a one-seed cell without them says it has none."""
    if t.n[i, j] > 1:
        return (f'<span class="ci" title="95% interval of the mean over {int(t.n[i, j])} seeds (Student\'s t)">'
                f"95% CI [{t.ci_low[i, j]:.2f}, {t.ci_high[i, j]:.2f}]</span>")
    found = t.bootstrapped.get((i, j))
    if found is not None:
        return (f'<span class="ci" title="95% interval, one seed: {esc(found.method)}">'
                f"95% CI [{found.low:.2f}, {found.high:.2f}] (bootstrap)</span>")
    return '<span class="ci" title="one seed: no interval is stated">n=1: no interval</span>'


def _delta_html(metric: Metric, delta: float) -> str:
    """A row's difference to random init: green where it is better by the metric's direction
    (lower, for a lower-is-better metric, and then said in words), red where worse."""
    d = round(delta, 2)  # the sign of what is printed
    word = metric.compare_word(d, 0.0)
    sign = {"better": "pos", "worse": "neg"}.get(word, "")
    said = f" ({word}: lower is better)" if not metric.higher_is_better and d else ""
    return f'<span class="delta {sign}">{d:+.2f} vs random init{said}</span>'


def _group_table(t: RunTable, g: Group, records_by_row: dict[tuple, list[dict]], table_id: str,
                 baselines: dict[str, list[str]]) -> str:
    labels, info = t.labels, t.model_info
    short = {c: (c[3] or "(no variant)") + (f" @{c[5][:SHORT_FP]}" if "@" in labels[c] else "") for c in g.keys}
    head = [_th_sort(0, "model", cls="name"), _th_sort(1, "method", cls="name"), _th_sort(2, "arch", cls="name")]
    head += [_th_sort(j + 3, esc(short[c]), f"{labels[c]} (fingerprint {c[5]})") for j, c in enumerate(g.keys)]
    fp_row = '<tr class="fp"><th class="name" colspan="3">fingerprint</th>' + "".join(
        f'<th title="{esc(c[5])}"><code>@{esc(c[5][:SHORT_FP])}</code></th>' for c in g.keys) + "</tr>"
    best, tied = {}, {}  # marked where at least two models measured the column
    for c in g.keys:
        j = t.col[c]
        vals = [t.mean[t.row[m], j] for m in g.models if t.n[t.row[m], j] > 0]
        best[c] = t.metric(c).best(vals) if len(vals) > 1 else None  # the lowest where lower is better
        tied[c] = t.tied_with_best(c, g.models)
    bodies = []
    for m in g.models:
        i = t.row[m]
        mi = info.get(m) or {}
        method, arch = mi.get("method") or "", mi.get("arch") or ""
        cells = [f'<td class="name" data-v="{esc(m)}"><button class="prov" type="button" aria-expanded="false" '
                 f'title="provenance">+</button>{esc(m)}</td>',
                 f'<td class="text" data-v="{esc(method)}">{esc(method)}</td>',
                 f'<td class="text" data-v="{esc(arch)}">{esc(arch)}</td>']
        for c in g.keys:
            j = t.col[c]
            n = int(t.n[i, j])
            if not n > 0:
                cells.append('<td data-v=""></td>')
                continue
            mean, std = float(t.mean[i, j]), float(t.std[i, j])
            if best[c] is not None and not t.metric(c).gain(mean, best[c]) < -1e-12:
                cls = ' class="best"'
            elif m in tied[c]:
                cls = ' class="tied" title="cannot be told apart from the best: their 95% intervals overlap"'
            else:
                cls = ""
            text = esc(format_cell(mean, std, n)) + _interval_html(t, i, j)
            delta = baseline_delta(t, m, c, baselines)
            if delta is not None:  # only a method's or an imported checkpoint's row (no context row)
                text += _delta_html(t.metric(c), delta)
            elif t.context.get(m) == "random_init" and baselines:
                text += '<span class="delta">baseline</span>'
            cells.append(f'<td{cls} data-v="{mean!r}">{text}</td>')
        prov = provenance(records_by_row.get((m, g.protocol, g.dataset, g.split), []))
        text = " ".join([m, method, arch]).lower()
        bodies.append(f'<tbody class="item" data-text="{esc(text)}"><tr class="main">{"".join(cells)}</tr>'
                      f'<tr class="prov" hidden><td colspan="{3 + len(g.keys)}">{_prov_html(prov)}</td></tr></tbody>')
    return (f'<table class="sortable headline" id="{esc(table_id)}"><thead><tr>{"".join(head)}</tr>{fp_row}</thead>'
            + "".join(bodies) + "</table>")


def _all_metrics_table(t: RunTable, protocol: str) -> str:
    keys = [c for c in t.keys if c[0] == protocol]
    models = t.rows_with(keys)
    head = _th_sort(0, "model", cls="name") + "".join(
        _th_sort(j + 1, esc(t.labels[c].split(" | ", 1)[1]), f"fingerprint {c[5]}") for j, c in enumerate(keys))
    cols = [t.col[c] for c in keys]
    rows = []
    for m in models:
        i = t.row[m]
        cells = [f'<td class="name" data-v="{esc(m)}">{esc(m)}</td>']
        for j in cols:
            n = t.n[i, j]
            mean = t.mean[i, j]
            v = "" if not n > 0 else repr(float(mean))
            cells.append(f'<td data-v="{v}">{esc(format_cell(mean, t.std[i, j], n)) if n > 0 else ""}</td>')
        rows.append(f'<tbody class="item" data-text="{esc(m.lower())}"><tr>{"".join(cells)}</tr></tbody>')
    return (f'<details><summary>every metric and variant ({len(keys)} columns)</summary>'
            f'<table class="sortable all-metrics"><thead><tr>{head}</tr></thead>{"".join(rows)}</table></details>')


def _protocol_section(t: RunTable, protocol: str, groups: list[Group],
                      records_by_row: dict[tuple, list[dict]], idx: int, baselines: dict[str, list[str]]) -> str:
    headline = declared_headline(protocol)
    direction = metric_of(protocol, groups[0].metric).direction
    metric_note = (f"headline metric <b>{esc(groups[0].metric)}</b> (declared by the protocol; {direction} is better)"
                   if headline else f"headline metric <b>{esc(groups[0].metric)}</b> (the protocol declares none: "
                                    "first metric by name)")
    out = [f'<section class="protocol" id="protocol-{esc(protocol)}" data-protocol="{esc(protocol)}">',
           f"<h2>{esc(protocol)}</h2><p class=\"note\">{metric_note}. Cells: mean ± std over seeds "
           "(n when &gt; 1) and the 95% interval (Student's t over seeds; one seed: a seeded bootstrap over the "
           "evaluation images where the record keeps per-image statistics, else none); "
           "★ best of the column (by the metric's direction); ≈ a row the best cannot be told apart from "
           "(their intervals overlap); "
           "the line below a value of a method's row is its difference to the random-init baseline "
           "(context rows get none). <b>+</b> opens a row's provenance.</p>"]
    for j, g in enumerate(groups):
        out.append(f"<h3>{esc(g.dataset)}/{esc(g.split)} — {esc(g.metric)}</h3>")
        out.append(_group_table(t, g, records_by_row, f"t-{idx}-{j}", baselines))
        specs = curve_specs(t, g)
        if specs:
            multi_fp = len({s["fp"] for s in specs}) > 1
            figs = []
            for s in specs:
                title, uri = plot_curve(t, g, s, multi_fp)
                figs.append(f'<figure><img class="plot" alt="{esc(g.protocol)} {esc(title)}" src="{uri}">'
                            f"<figcaption>{esc(title)}</figcaption></figure>")
            out.append('<div class="plots">' + "".join(figs) + "</div>")
    out.append(_all_metrics_table(t, protocol))
    out.append("</section>")
    return "\n".join(out)


def _paper_section(cells: pd.DataFrame, tables_checked: list[str]) -> str:
    out = ['<section id="paper"><h2>Paper: measured vs published</h2>']
    if cells.empty:
        out.append("<p class=\"note\">No published table to compare with.</p></section>")
        return "\n".join(out)
    spoken = cells[cells["verdict"].isin(["no record", "no public checkpoint"]) == False]  # noqa: E712
    if spoken.empty:
        zoo = sorted({z for z in cells["zoo_name"] if z})
        out.append(
            "<p class=\"note\">None of these records is of a checkpoint the published tables name, so no "
            f"cell is compared. Tables checked: {esc(', '.join(tables_checked))}; their checkpoints (zoo "
            f"names, the model names <code>ssl-bench reproduce TABLE</code> records): "
            f"{esc(', '.join(zoo))}.</p></section>")
        return "\n".join(out)
    out.append('<p class="note">Cells of the published tables whose checkpoint has records here. delta = '
               'measured − paper; verdict: ok within 2 std of the seeds or the table\'s tolerance, else DIFFERS '
               '(harness.paper.verdict.verdict). Only records measured under the table\'s protocol settings count.</p>')
    head = ["table", "row", "model", "zoo", "protocol", "dataset", "variant", "metric", "paper", "measured",
            "delta", "verdict"]
    ths = "".join(_th_sort(j, h, cls="name" if j < 8 or j == 11 else "") for j, h in enumerate(head))
    rows = []
    for _, r in spoken.iterrows():
        n = int(r["n"])
        meas = (f"{r['measured']:.2f}" + (f" ± {r['std']:.2f} (n={n})" if n > 1 else "")) if n > 0 else "–"
        delta = f"{r['delta']:+.2f}" if n > 0 else "–"
        model = f"{r['method']} {r['arch']} {r['pretrain_data']}"
        vals = [(r["table_name"], r["table_name"]), (str(r["row"]), str(r["row"])), (model, model),
                (r["zoo_name"], r["zoo_name"]), (r["protocol"], r["protocol"]), (r["dataset"], r["dataset"]),
                (r["variant"], r["variant"] or "–"), (r["metric"], r["metric"]),
                (repr(float(r["value"])), f"{r['value']:.1f}"),
                (repr(float(r["measured"])) if n > 0 else "", meas),
                (repr(float(r["delta"])) if n > 0 else "", delta)]
        tds = "".join(f'<td class="{"text" if j < 8 else ""}" data-v="{esc(v)}">{esc(t)}</td>'
                      for j, (v, t) in enumerate(vals))
        note = f' title="{esc(r["note"])}"' if r["note"] else ""
        tds += (f'<td class="verdict text {_verdict_class(r["verdict"])}" data-v="{esc(r["verdict"])}"{note}>'
                f'{esc(r["verdict"])}</td>')
        text = " ".join(str(x) for x in (model, r["zoo_name"], r["protocol"], r["dataset"], r["variant"],
                                         r["verdict"])).lower()
        rows.append(f'<tbody class="item" data-text="{esc(text)}"><tr>{tds}</tr></tbody>')
    out.append(f'<table class="sortable" id="paper-table"><thead><tr>{ths}</tr></thead>{"".join(rows)}</table>')
    counts = spoken["verdict"].map(lambda v: v.split(" (")[0]).value_counts()
    out.append('<p class="note">cells: ' + ", ".join(f"{v} {esc(k)}" for k, v in counts.items()) + "</p>")
    out.append("</section>")
    return "\n".join(out)


def build_report(source: str | Path | Iterable[dict] | pd.DataFrame | None = None, *,
                 title: str = "ssl-bench report", paper_tables: list[str] | None = None,
                 generated: str | None = None, table: RunTable | None = None,
                 paper: pd.DataFrame | None = None, examples_dir: Path | None = None,
                 pairs: list | None = None) -> str:
    """The HTML page of the records in ``source`` (a records folder, default results/runs;
    record dicts; or a load_results() frame). ``paper_tables``: the published tables to
    compare with (default all; [] for none). A caller that already has them passes the run's
    leaderboard (``table``: build_leaderboard's RunTable) and its paper cells
    (``paper``: harness.paper.verdict.all_paper_cells of ``paper_tables``), so that neither is
    computed twice. ``examples_dir``: the folder whose ``show/`` holds `ssl-bench show`'s drawings
    (the report's own folder, for write_report). ``pairs``: a run's PairStatus list
    (harness.results.pair_status; default the ``pairs.json`` a run wrote beside a records folder),
    whose failed and not-applicable pairs get a section. A frame's table is read off its columns
    (harness.results.run_table.table_of_records); its records, for the panels, sweeps and paper
    cells, are those of its rows (:func:`_frame_records`)."""
    if isinstance(source, pd.DataFrame):
        records = _frame_records(source)
        table = table_of_records(source) if table is None else table
    else:
        records = _record_dicts(source)
    folder = Path(source or runs_dir()) if source is None or isinstance(source, (str, Path)) else None
    if folder is not None and not folder.is_dir():
        folder = None  # one record file
    if table is None:  # a folder's table: its index's number rows, as `ssl-bench leaderboard` reads them
        table = table_of_folder(folder) if folder is not None else build_leaderboard(records)
    t = run_table(table)
    records_by_row = _records_by_row(records, t)
    groups = headline_groups(t) if len(t) else []
    by_protocol: dict[str, list[Group]] = defaultdict(list)
    for g in groups:
        by_protocol[g.protocol].append(g)
    from harness.paper.spec import list_tables

    tables = list_tables() if paper_tables is None else list(paper_tables)
    if paper is not None:
        cells = paper
    else:
        cells = all_paper_cells(records, tables) if tables else pd.DataFrame()
    generated = generated or _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    if pairs is None and folder is not None:  # a folder: its run's pairs, and its records' parts without a number
        pairs = read_pairs(folder.parent / "pairs.json") + t.no_number
    sections, nav = _sections(t, records, by_protocol, records_by_row, cells, tables, examples_dir, pairs or [])
    overview = overview_html(build_overview(t, pairs), t.readings) if len(t) else ""
    if overview:
        sections, nav = [overview] + sections, '<a href="#overview">overview</a>' + nav
    meta = (f"{len(records)} records · {len(t.models)} models · {len(by_protocol)} protocols · "
            f"generated {esc(generated)}")
    return _page(title, meta, nav, sections)


def _sections(t: RunTable, records: list[dict], by_protocol: dict, records_by_row: dict, cells: pd.DataFrame,
              tables: list[str], examples_dir: Path | None, pairs: list) -> tuple[list[str], str]:
    """The page's sections, in order, and the navigation links to them."""
    baselines = random_init_baselines(t)
    sections = [_protocol_section(t, p, gs, records_by_row, i, baselines)
                for i, (p, gs) in enumerate(by_protocol.items())]
    if not sections:
        sections = ['<section><h2>No records</h2><p class="note">No result record was found.</p></section>']
    links = [(f"protocol-{p}", p) for p in by_protocol]
    extra = [("pairs", "without a number", html_section(pairs)),
             ("examples", "examples", _examples_section(examples_dir) if examples_dir else ""),
             ("sweeps", "sweeps", sweeps_section(records)),  # every value of each sweep the records keep
             ("paper", "paper", _paper_section(cells, tables) if tables else ""),
             ("conflicts", "not comparable", _conflicts_section(t.messages))]
    for anchor, label, part in extra:
        if part:
            sections.append(part)
            links.append((anchor, label))
    return sections, "".join(f'<a href="#{esc(a)}">{esc(label)}</a>' for a, label in links)


def _conflicts_section(messages: list[str]) -> str:
    if not messages:
        return ""
    return ('<section id="conflicts"><h2>Not comparable</h2><ul class="messages">'
            + "".join(f"<li>{esc(m)}</li>" for m in messages) + "</ul></section>")


def _examples_section(folder: Path) -> str:
    """What `ssl-bench show` drew into the report's folder, each drawing inlined (the page stays
    one self-contained file)."""
    import base64

    parts = []
    for e in read_index(folder):
        png = Path(folder) / e["png"]
        if not png.is_file():
            continue
        uri = "data:image/png;base64," + base64.b64encode(png.read_bytes()).decode("ascii")
        note = (f"{esc(e['protocol'])} ({esc(e.get('preset') or 'default')}) on {esc(e['model'])} · weights "
                f"{esc(str(e.get('weights_key', ''))[:12])} · data {esc(e.get('data_root', ''))} · "
                f"seed {esc(str(e.get('seed', '')))} · {esc(e['png'])}")
        parts.append(f'<figure><img alt="{esc(e.get("title", e["png"]))}" src="{uri}">'
                     f'<figcaption class="note">{note}</figcaption></figure>')
    if not parts:
        return ""
    return ('<section id="examples"><h2>Examples</h2><p class="note">What each probe sees and predicts, '
            'item by item (<code>ssl-bench show PROTOCOL --model SPEC</code>): the input as the model saw it '
            'after the protocol\'s transform, the target, the prediction.</p>' + "".join(parts) + "</section>")


def _page(title: str, meta: str, nav: str, sections: list[str]) -> str:
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; img-src data:; style-src 'unsafe-inline'; \
script-src 'unsafe-inline'">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{esc(title)}</title><style>{html_assets.table_stylesheet()}</style></head><body>
<header><h1>{esc(title)}</h1>
<span class="meta">{meta}</span>
<input id="filter" type="search" placeholder="filter rows (model, method, arch, ...)" aria-label="filter rows">
<span id="shown" class="hidden-count"></span>
<nav>{nav}</nav></header>
<main>
{chr(10).join(sections)}
</main>
<script>{html_assets.sortable_table_script()}</script>
</body></html>
"""


def _records_by_row(records: list[dict], t: RunTable) -> dict[tuple, list[dict]]:
    """(row, protocol, dataset, split) -> the records with a number behind it: what a row's
    provenance shows. A row is the record's model name, or ``name@sha8`` where the table tells two
    checkpoints of one name apart (harness.results.table.disambiguate_models)."""
    out: dict[tuple, list[dict]] = defaultdict(list)
    for rec in records:
        if not rec.get("id") or not any(is_number(v) for v in (rec.get("metrics") or {}).values()):
            continue  # no number row: no table row (harness.results.index.record_numbers)
        model, proto = rec["model"], rec["protocol"]
        name = str(model["name"])
        if name not in t.row:
            name = f"{name}@{weights_label(model)[:SHORT_FP]}"
        out[(name, str(proto["name"]), str(proto.get("dataset") or ""), str(proto.get("split") or ""))].append(rec)
    return out


def _record_dicts(source: str | Path | Iterable[dict] | None) -> list[dict]:
    """The result records of a folder (default results/runs), of one record file, or given as dicts."""
    from harness.results.records import is_record, iter_records

    if source is None or isinstance(source, (str, Path)):
        path = Path(source) if source is not None else None
        found = [json.loads(path.read_text())] if path is not None and path.is_file() else iter_records(path)
        return [r for r in found if is_record(r)]
    return [r for r in source if is_record(r)]


def _frame_records(df: pd.DataFrame) -> list[dict]:
    """The records behind a load_results() frame's rows: read from the records folder it was loaded
    from (``df.attrs["records_folder"]``, looked up by file in its index), else made of its columns
    (harness.results.records.to_records: a frame of record dicts holds them nowhere else)."""
    if not len(df):
        return []
    folder = df.attrs.get("records_folder")
    if folder is None or not Path(folder).is_dir():
        from harness.results.records import to_records

        return to_records(df)
    from harness.results.index import index_of, is_record

    index = index_of(Path(folder))
    ids = set(df["record_id"].astype(object).tolist())
    found = [index.record(f"{rid}.json") for rid in sorted(ids, key=lambda rid: f"{rid}.json")]
    found = [r for r in found if is_record(r) and r.get("id") in ids]
    if len(found) < len(ids):  # a record whose file is not named by its id: looked for among all
        found = [r for r in index.records(records_only=True) if is_record(r) and r.get("id") in ids]
    return found


def write_report(out: str | Path | None = None, source: str | Path | Iterable[dict] | pd.DataFrame | None = None,
                 **kwargs) -> Path:
    """Write build_report(source) to ``out`` (default results/report.html)."""
    from harness.io_utils import atomic_write_text
    from harness.paths import results_dir

    path = Path(out) if out else results_dir() / "report.html"
    kwargs.setdefault("examples_dir", path.parent)
    return atomic_write_text(path, build_report(source, **kwargs))


# ----------------------------------------------------------------------------- browser
CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


def chromium_executable() -> str | None:
    """The installed Chromium that the browser test and scripts/report_screenshot.py drive
    (``$SSL_BENCH_CHROMIUM``, else Debian's ``chromium`` on PATH); None when there is none.
    Nothing is downloaded: Playwright is pointed at this executable."""
    import os
    import shutil

    env = os.environ.get("SSL_BENCH_CHROMIUM")
    if env:
        return env if Path(env).is_file() else shutil.which(env)
    return next((p for p in map(shutil.which, CHROMIUM_NAMES) if p), None)


# ----------------------------------------------------------------------------- CLI
def add_cli(subparsers) -> None:
    r = subparsers.add_parser("report", help="one self-contained HTML page of the result records "
                                              "(tables, best values, curves, provenance, paper numbers)")
    r.add_argument("--runs", default=None, help=f"records folder (default {runs_dir()})")
    r.add_argument("--out", default=None, help="HTML file to write (default results/report.html)")
    r.add_argument("--title", default="ssl-bench report")
    r.add_argument("--paper", default=None,
                   help="comma-separated paper tables to compare with (default all; 'none' for no paper section)")
    r.set_defaults(func=cmd_report)


def cmd_report(args) -> int:
    from harness.results.index import index_of

    runs = Path(args.runs) if args.runs else runs_dir()
    if not runs.is_dir() or not index_of(runs).served():
        print(f"no records under {runs}")
        return 1
    tables = None if args.paper is None else ([] if args.paper == "none" else
                                              [t.strip() for t in args.paper.split(",") if t.strip()])
    path = write_report(args.out, runs, title=args.title, paper_tables=tables)
    print(f"report: {path}")
    return 0


__all__ = ["build_report", "write_report", "headline_groups", "curve_specs",
           "provenance", "chromium_executable", "add_cli", "cmd_report"]
