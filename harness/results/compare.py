"""`ssl-bench compare A B`: two runs side by side, per protocol, with a paired test.

A and B are each a model name in the records folder, a folder of records (one model), or
``FOLDER:MODEL``. For every leaderboard column both measured (protocol, dataset, split,
variant; the protocol's headline metric unless told otherwise) the result is
``mean(B) - mean(A)``; where both measured the same seeds (dense_nn: the same training
subsets; linear probe: the same seeds) the seeds pair up, and a two-sided paired test over
the pairs says how sure the difference is:

- ``t`` (default): paired t-test, ``scipy.stats.ttest_rel(b, a)``;
- ``wilcoxon``: Wilcoxon signed-rank test, ``scipy.stats.wilcoxon(b - a)`` (exact for small n).

One more row per protocol (variant "all") pools its columns seed by seed: for each seed, the
mean over the columns both runs measured with it; the test runs over the seeds, which are the
independent repeats (variants of one seed share the features and are not). A column with one
value each (k-NN has no seed) has a delta and no test.
Records of a column measured under different protocol fingerprints are refused, as the
leaderboard refuses them (IncomparableResultsError): their numbers cannot be compared.
"""
from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from harness.errors import ConfigError
from harness.protocol_info import headline_metric, metric_of
from harness.results.records import iter_records, runs_dir
from harness.results.table import IncomparableResultsError, conflict_message, fingerprint_conflicts, flatten_records

TESTS = {"t": "paired t-test (scipy.stats.ttest_rel, two-sided)",
         "wilcoxon": "Wilcoxon signed-rank test (scipy.stats.wilcoxon, two-sided)"}
COLUMNS = ["protocol", "dataset", "split", "variant", "metric", "fingerprint", "n_a", "n_b", "mean_a", "mean_b",
           "delta", "b_is", "pairs", "seeds", "test", "statistic", "p_value", "note"]


@dataclass
class RunSet:
    label: str
    records: list[dict]


def resolve_run(spec: str, runs: str | Path | None = None) -> RunSet:
    """A model name in ``runs`` (default results/runs), a folder of one model's records, or
    ``FOLDER:MODEL``."""
    folder, model = None, spec
    if Path(spec).is_dir():
        folder, model = Path(spec), None
    elif ":" in spec and Path(spec.rsplit(":", 1)[0]).is_dir():
        head, model = spec.rsplit(":", 1)
        folder = Path(head)
    records = [r for r in iter_records(folder if folder is not None else (Path(runs) if runs else None))
               if isinstance(r.get("model"), dict) and r["model"].get("name") and isinstance(r.get("protocol"), dict)]
    names = sorted({r["model"]["name"] for r in records})
    where = folder if folder is not None else (Path(runs) if runs else runs_dir())
    if model is None:
        if len(names) != 1:
            raise ConfigError(f"{where} holds records of {len(names)} models ({', '.join(names) or 'none'}); "
                              f"name one as {where}:MODEL")
        model = names[0]
    chosen = [r for r in records if r["model"]["name"] == model]
    if not chosen:
        raise ConfigError(f"no records of a model named {model!r} under {where}; models there: "
                          f"{', '.join(names) or '(none)'} (or give a folder of records)")
    return RunSet(spec, chosen)


def _values(records: list[dict]) -> pd.DataFrame:
    """One value per (column, seed): the newest record's, as the leaderboard keeps it."""
    flat = flatten_records(records)
    flat = flat.sort_values("created", na_position="first", kind="stable")
    flat["seed_key"] = flat["seed"].map(lambda s: "-" if pd.isna(s) else str(s))
    return flat.drop_duplicates(["protocol", "dataset", "split", "variant", "metric", "fingerprint", "seed_key"],
                                keep="last")


def paired_test(a: list[float], b: list[float], test: str = "t") -> tuple[float | None, float | None, str]:
    """(statistic, two-sided p, note) of paired samples; None where no test applies."""
    from scipy import stats

    if len(a) < 2:
        return None, None, "one pair: no test" if a else "no common seeds: no test"
    diffs = [y - x for x, y in zip(a, b)]
    if all(abs(d - diffs[0]) < 1e-12 for d in diffs):
        return None, None, "the differences are all equal: no test"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        if test == "t":
            res = stats.ttest_rel(b, a)
        elif test == "wilcoxon":
            res = stats.wilcoxon(diffs)
        else:
            raise ConfigError(f"unknown test {test!r}; known: {', '.join(TESTS)}")
    stat, p = float(res.statistic), float(res.pvalue)
    return (None if math.isnan(stat) else stat), (None if math.isnan(p) else p), ""


def _seed_order(seed: str) -> tuple:
    """Seeds in numeric order, whatever the order of the records they came in."""
    return (0, int(seed), "") if seed.lstrip("-").isdigit() else (1, 0, seed)


def _pooled_rows(pooled: dict[tuple, dict[str, list[tuple[float, float]]]], common: list[tuple],
                 test: str) -> list[dict]:
    """Per (protocol, metric) measured in two columns or more: the row over the seeds, each
    seed's value the mean over the columns both runs measured with it."""
    n_cols = {k: sum(1 for c in common if (c[0], c[4]) == k) for k in pooled}
    rows = []
    for (protocol, m), by_seed in pooled.items():
        if n_cols[(protocol, m)] < 2:
            continue  # the column's own row says it all
        seeds = sorted(by_seed, key=_seed_order)
        pa = [sum(x for x, _ in by_seed[s]) / len(by_seed[s]) for s in seeds]
        pb = [sum(y for _, y in by_seed[s]) / len(by_seed[s]) for s in seeds]
        stat, p, note = paired_test(pa, pb, test)
        rows.append(dict(protocol=protocol, dataset="", split="", variant="all", metric=m, fingerprint="",
                         n_a=len(pa), n_b=len(pb), mean_a=sum(pa) / len(pa) if pa else math.nan,
                         mean_b=sum(pb) / len(pb) if pb else math.nan,
                         delta=(sum(pb) - sum(pa)) / len(pa) if pa else math.nan, pairs=len(pa),
                         seeds=",".join(seeds), test=test if p is not None else "", statistic=stat, p_value=p,
                         note=f"{n_cols[(protocol, m)]} columns, averaged per seed; "
                              + (note or "the test is over the seeds")))
    return rows


def compare_runs(a: list[dict], b: list[dict], *, metric: str | None = None, all_metrics: bool = False,
                 test: str = "t") -> pd.DataFrame:
    """Per column both runs measured: means, delta = mean(B) - mean(A), the seeds that pair up
    and the paired test over them; then per protocol the pooled row (variant "all").
    ``metric``: compare this metric instead of each protocol's headline; ``all_metrics``: every one."""
    if test not in TESTS:
        raise ConfigError(f"unknown test {test!r}; known: {', '.join(TESTS)}")
    conflicts = fingerprint_conflicts(a + b)
    if conflicts:
        raise IncomparableResultsError(
            "A and B cannot be compared:\n  " + "\n  ".join(conflict_message(c) for c in conflicts)
            + "\nCompare runs measured with the same protocol settings.")
    va, vb = _values(a), _values(b)
    cols = ["protocol", "dataset", "split", "variant", "metric", "fingerprint"]
    common = sorted(set(map(tuple, va[cols].values.tolist())) & set(map(tuple, vb[cols].values.tolist())))
    if not all_metrics:
        by_group: dict[tuple, list[str]] = {}
        for c in common:
            by_group.setdefault(c[:4] + c[5:], []).append(c[4])
        common = [c for c in common if c[4] == (metric if metric is not None else
                                                headline_metric(c[0], by_group[c[:4] + c[5:]]))]
    rows = []
    pooled: dict[tuple, dict[str, list[tuple[float, float]]]] = {}  # (protocol, metric) -> seed -> pairs
    for c in common:
        sa = va[(va[cols] == list(c)).all(axis=1)].set_index("seed_key")["value"]
        sb = vb[(vb[cols] == list(c)).all(axis=1)].set_index("seed_key")["value"]
        seeds = sorted((s for s in sa.index if s in sb.index and s != "-"), key=_seed_order)
        if not seeds and list(sa.index) == ["-"] and list(sb.index) == ["-"]:
            seeds = ["-"]  # one unseeded value each: a pair of one
        pa, pb = [float(sa[s]) for s in seeds], [float(sb[s]) for s in seeds]
        stat, p, note = paired_test(pa, pb, test)
        only = sorted(set(sa.index) ^ set(sb.index))
        if only:
            note = "; ".join(x for x in (note, f"seeds in one run only: {', '.join(only)} (not paired)") if x)
        rows.append(dict(zip(cols, c), n_a=len(sa), n_b=len(sb), mean_a=float(sa.mean()), mean_b=float(sb.mean()),
                         delta=float(sb.mean() - sa.mean()), pairs=len(pa), seeds=",".join(seeds),
                         test=test if p is not None else "", statistic=stat, p_value=p, note=note))
        by_seed = pooled.setdefault((c[0], c[4]), {})
        for s, x, y in zip(seeds, pa, pb):
            by_seed.setdefault(s, []).append((x, y))
    rows += _pooled_rows(pooled, common, test)
    out = pd.DataFrame(rows, columns=COLUMNS)
    # B better, worse or equal than A by the metric's direction (a lower RMSE is better)
    out["b_is"] = [metric_of(p, m).compare_word(b, a) if a == a and b == b else ""
                   for p, m, a, b in zip(out["protocol"], out["metric"], out["mean_a"], out["mean_b"])]
    order = {p: i for i, p in enumerate(dict.fromkeys(c[0] for c in common))}
    if len(out):
        out["_o"] = out["protocol"].map(order)
        out["_all"] = out["variant"] == "all"
        out = out.sort_values(["_o", "_all"], kind="stable").drop(columns=["_o", "_all"]).reset_index(drop=True)
    return out


def format_compare(table: pd.DataFrame, label_a: str, label_b: str, test: str = "t") -> str:
    if table.empty:
        return f"{label_a} and {label_b} have no column in common (same protocol, dataset, split, variant)"
    header = ["protocol", "data", "variant", "metric", "A", "B", "delta (B-A)", "B is", "pairs", "p", "note"]
    body = []
    for _, r in table.iterrows():
        data = f"{r['dataset']}/{r['split']}" if r["dataset"] else ""
        fmt = lambda m, n: f"{m:.2f}" + (f" (n={n})" if n > 1 else "")  # noqa: E731
        p = "" if r["p_value"] is None or r["p_value"] != r["p_value"] else f"{r['p_value']:.3g}"
        metric = metric_of(r["protocol"], r["metric"])
        name = r["metric"] if metric.higher_is_better else f"{r['metric']} ↓"  # the arrow where lower is better
        body.append([r["protocol"], data, r["variant"] or "-", name, fmt(r["mean_a"], r["n_a"]),
                     fmt(r["mean_b"], r["n_b"]), f"{r['delta']:+.2f}", r["b_is"], str(r["pairs"]), p, r["note"]])
    widths = [max(len(x) for x in [h] + [row[j] for row in body]) for j, h in enumerate(header)]
    right = {4, 5, 6, 8, 9}
    line = lambda r: "  ".join(v.rjust(w) if j in right else v.ljust(w)  # noqa: E731
                               for j, (v, w) in enumerate(zip(r, widths))).rstrip()
    out = [f"A = {label_a}", f"B = {label_b}", f"delta = mean(B) - mean(A); B is: better or worse than A by the "
           f"metric's direction (↓: lower is better); p: {TESTS[test]} over the seeds both runs measured", "",
           line(header), "  ".join("-" * w for w in widths)] + [line(r) for r in body]
    return "\n".join(out)


# ----------------------------------------------------------------------------- CLI
def add_cli(subparsers) -> None:
    c = subparsers.add_parser("compare", help="two models or record sets side by side, per protocol, with a "
                                              "paired test over common seeds")
    c.add_argument("a", help="model name, records folder, or FOLDER:MODEL")
    c.add_argument("b", help="model name, records folder, or FOLDER:MODEL")
    c.add_argument("--runs", default=None, help=f"records folder for model names (default {runs_dir()})")
    c.add_argument("--metric", default=None, help="metric to compare (default: each protocol's headline)")
    c.add_argument("--all-metrics", action="store_true", help="compare every metric")
    c.add_argument("--test", choices=sorted(TESTS), default="t",
                   help="paired test: t = paired t-test (default), wilcoxon = Wilcoxon signed-rank")
    c.add_argument("--csv", default=None, help="also write the table to this CSV file")
    c.set_defaults(func=cmd_compare)


def cmd_compare(args) -> int:
    a, b = resolve_run(args.a, args.runs), resolve_run(args.b, args.runs)
    table = compare_runs(a.records, b.records, metric=args.metric, all_metrics=args.all_metrics, test=args.test)
    print(format_compare(table, a.label, b.label, args.test))
    if args.csv:
        from harness.io_utils import atomic_write_text

        print(f"written: {atomic_write_text(Path(args.csv), table.to_csv(index=False))}")
    return 0


__all__ = ["RunSet", "resolve_run", "compare_runs", "paired_test", "format_compare", "TESTS", "add_cli",
           "cmd_compare"]
