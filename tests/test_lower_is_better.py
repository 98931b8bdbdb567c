"""A lower-is-better protocol (a depth probe's RMSE) read by every view: the leaderboard's best
row is the lowest, the report stars the lowest and says a lower delta to random init is better,
"indistinguishable from best" is measured from the lowest, a margin passes when the model is
lower by the margin, a paper verdict reads a lower measurement as better, plots and compare say
the direction, and explain says it beside the number.

The protocol is synthetic: a declaration registered for the test only (harness.registry keeps
the declarations it read; harness.protocol_info caches what it looked up)."""
from __future__ import annotations

import re
from types import SimpleNamespace

import pandas as pd
import pytest

from harness.declaration import ProtocolDeclaration
from harness.metrics import Metric

PROTOCOL = "depth_demo"
FP = "d3" * 8
# rmse (lower is better) per model over three seeds; delta1 (higher is better) beside it.
# a is the best; c's interval overlaps a's (indistinguishable); b is clearly worse; random init worst.
RMSE = {"a": (0.30, 0.31, 0.29), "b": (0.50, 0.51, 0.49), "c": (0.32, 0.28, 0.36), "random": (0.90, 0.91, 0.89)}
DELTA1 = {"a": 80.0, "b": 60.0, "c": 78.0, "random": 20.0}


@pytest.fixture
def depth_demo():
    """The registry with ``depth_demo`` declared beside the built-in protocols."""
    from harness import registry
    from harness.protocol_info import protocol_declaration

    before = registry.protocol_declarations()
    decl = ProtocolDeclaration(name=PROTOCOL, module="tests.test_lower_is_better",
                               metrics=(Metric("rmse", unit="m", direction="lower"), Metric("delta1")))
    registry._DECLARATIONS = {**before, PROTOCOL: decl}
    protocol_declaration.cache_clear()
    try:
        yield decl
    finally:
        registry._DECLARATIONS = before
        protocol_declaration.cache_clear()


def _record(model: str, seed: int, rmse: float, delta1: float) -> dict:
    method = "random_init" if model == "random" else "dino"
    return {"id": f"{model}-{seed}", "created": "2026-01-01T00:00:00+00:00",
            "model": {"name": model, "method": method, "arch": "vit_tiny", "weights_key": f"w-{model}"},
            "protocol": {"name": PROTOCOL, "dataset": "synth_depth", "split": "val", "fingerprint": FP,
                         "params": {"resize": 64}},
            "seed": seed, "variant": {}, "metrics": {"rmse": rmse, "delta1": delta1},
            "cost": {"device_type": "cpu"}}


def records(models=tuple(RMSE)) -> list[dict]:
    return [_record(m, seed, v, DELTA1[m]) for m in models for seed, v in zip((0, 1, 2), RMSE[m])]


def _rmse_key(t):
    (key,) = [c for c in t.keys if c[4] == "rmse"]
    return key


def test_the_declaration_reads_lower_is_better(depth_demo):
    from harness.protocol_info import metric_of

    assert metric_of(PROTOCOL, "rmse").direction == "lower" and metric_of(PROTOCOL, "rmse").declared
    assert metric_of(PROTOCOL, "delta1").higher_is_better


def test_leaderboard_best_row_is_the_lowest_and_deltas_say_better(depth_demo):
    from harness.results.leaderboard import best_rows, build_leaderboard, format_console, to_markdown
    from harness.results.run_table import run_table

    t = run_table(build_leaderboard(records()))
    key = _rmse_key(t)
    assert best_rows(t, key, t.models) == {"a"}
    (d1,) = [c for c in t.keys if c[4] == "delta1"]
    assert best_rows(t, d1, t.models) == {"a"}  # 80 is the highest: higher-is-better beside it
    assert t.labels[key].endswith("rmse ↓") and not t.labels[d1].endswith("↓")
    md = to_markdown(t)
    # the protocol's own table, below the overview (which has a row per model too)
    table = md[md.index("| model | rmse ↓ | delta1 |"):]
    row_a = next(line for line in table.splitlines() if line.startswith("| a |"))
    row_b = next(line for line in table.splitlines() if line.startswith("| b |"))
    assert "**0.30** ± 0.01 (n=3) Δ -0.60 (better)" in row_a
    assert "**" not in row_b.split("|")[2]  # b's rmse is not starred
    assert "| model | rmse ↓ | delta1 |" in md
    assert "↓: lower is better, the lowest is best" in md
    console = format_console(t)
    assert "0.30*" in console and "0.90*" not in console


def test_report_stars_the_lowest_ties_with_the_lowest_and_deltas_say_better(depth_demo):
    from harness.results.report import build_report

    page = build_report(records(), paper_tables=[])
    section = page[page.index('id="protocol-depth_demo"'):]
    assert "(declared by the protocol; lower is better)" in section
    headline = section[:section.index("every metric and variant")]
    cells = {m: re.search(rf'data-v="{m}">.*?</tr>', headline, re.S).group(0) for m in RMSE}
    assert '<td class="best" data-v="0.3' in cells["a"]
    assert 'class="tied"' in cells["c"] and 'class="best"' not in cells["c"]
    assert 'class="best"' not in cells["b"] and 'class="tied"' not in cells["b"]
    assert 'class="delta pos">-0.60 vs random init (better: lower is better)' in cells["a"]
    assert 'class="delta pos">-0.40 vs random init (better' in cells["b"]
    assert "baseline" in cells["random"]


def test_report_delta_of_a_model_worse_than_random_init_says_worse(depth_demo):
    from harness.results.report import build_report

    recs = records(("a", "random"))
    for r in recs:  # a's rmse above random init's: a lower-is-better delta > 0 is worse
        if r["model"]["name"] == "a":
            r["metrics"]["rmse"] += 1.0
    page = build_report(recs, paper_tables=[])
    assert 'class="delta neg">+0.40 vs random init (worse: lower is better)' in page


def test_indistinguishable_from_best_is_measured_from_the_lowest(depth_demo):
    from harness.results.leaderboard import build_leaderboard
    from harness.results.run_table import run_table

    t = run_table(build_leaderboard(records()))
    key = _rmse_key(t)
    assert t.tied_with_best(key, t.models) == {"c"}
    # the highest (random init, 0.90) would have tied nobody: it is not what is measured from
    assert "random" not in t.tied_with_best(key, t.models)


def test_margin_passes_when_the_model_is_lower_by_the_margin(depth_demo):
    from harness.results.margins import MarginCheck, MarginSpec, check_margins, format_margins, margins_failed

    recs = records()
    recs += [_record("worse", s, v, 10.0) for s, v in zip((0, 1, 2), (1.2, 1.2, 1.2))]
    spec = MarginSpec(reference=["random"], models=["a", "b", "worse"],
                      checks=[MarginCheck(PROTOCOL, "rmse", at_least=0.5)])
    rows = {r["model"]: r for r in check_margins(spec, recs)}
    assert rows["a"]["verdict"] == "pass" and rows["a"]["margin"] == pytest.approx(0.60)
    assert rows["b"]["verdict"] == "FAIL" and rows["b"]["margin"] == pytest.approx(0.40)  # lower, not by 0.5
    assert rows["worse"]["verdict"] == "FAIL" and rows["worse"]["margin"] == pytest.approx(-0.30)
    text = format_margins(spec, list(rows.values()))
    assert "lower is better for rmse" in text
    assert any("worse" in line and "better by -0.30" in line for line in margins_failed(list(rows.values())))


def _paper_table(values: list[float], tolerance: float = 0.05):
    rows = pd.DataFrame({"protocol": [PROTOCOL] * len(values), "dataset": ["synth_depth"] * len(values),
                         "variant": [""] * len(values), "metric": ["rmse"] * len(values), "value": values})
    spec = SimpleNamespace(protocols={PROTOCOL: SimpleNamespace(tolerance=tolerance, variant={})})
    return SimpleNamespace(rows=rows, spec=spec)


def test_paper_verdict_of_a_lower_is_better_cell(depth_demo):
    from harness.paper.verdict import DIFFERS, OK, compare_cells, verdict

    measured = [r for r in records(("a",))]  # mean 0.30
    tab = _paper_table([0.40, 0.20, 0.32])
    job = SimpleNamespace(protocol=PROTOCOL, variant="", cells=[0, 1, 2], records=measured, status="done",
                          message="", skipped=False)
    cells = compare_cells(tab, [job])
    assert list(cells["reads"]) == ["better", "worse", "better"]  # 0.30 < 0.40 is better; > 0.20 worse
    assert cells.at[0, "verdict"].startswith(DIFFERS) and "measured is better: lower is better" in cells.at[0,
                                                                                                            "verdict"]
    assert cells.at[1, "verdict"].startswith(DIFFERS) and "measured is worse" in cells.at[1, "verdict"]
    assert cells.at[2, "verdict"].startswith(OK)  # within the tolerance either way
    # the tolerance is two-sided whatever the direction; a higher-is-better DIFFERS reads as before
    assert verdict(-0.1, 0.0, 1, 0.05) == f"{DIFFERS} (|delta| > 0.05)"


def test_plots_label_the_direction_and_keep_the_lowest(depth_demo):
    from harness.results.leaderboard import build_leaderboard
    from harness.results.plots import bar_spec, plot_selection
    from harness.results.run_table import run_table

    t = run_table(build_leaderboard(records()))
    spec = bar_spec(t, PROTOCOL)
    assert spec["ylabel"] == "rmse (lower is better ↓)"
    models, note = plot_selection(t, [_rmse_key(t)], limit=2)
    assert set(models) == {"a", "c"} and note  # the two lowest, not the two highest


def test_compare_says_which_is_better_by_direction(depth_demo):
    from harness.results.compare import compare_runs, format_compare

    recs = records(("a", "b"))
    a = [r for r in recs if r["model"]["name"] == "a"]
    b = [r for r in recs if r["model"]["name"] == "b"]
    table = compare_runs(a, b, all_metrics=True)
    by_metric = table.set_index("metric")
    assert by_metric.at["rmse", "b_is"] == "worse" and by_metric.at["rmse", "delta"] > 0
    assert by_metric.at["delta1", "b_is"] == "worse" and by_metric.at["delta1", "delta"] < 0
    assert compare_runs(b, a, all_metrics=True).set_index("metric").at["rmse", "b_is"] == "better"
    text = format_compare(table, "a", "b")
    assert "rmse ↓" in text and "delta1 ↓" not in text


def test_explain_says_the_direction_beside_the_number(depth_demo):
    from harness.results.explain import record_side

    side = record_side(_record("a", 0, 0.3, 80.0))
    assert side.label.endswith("rmse 0.30 (lower is better)")
