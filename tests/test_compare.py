"""`ssl-bench compare A B`: per-column delta, the paired test over common seeds (checked
against scipy directly), pooled protocol rows, seeds of one run only, refusal of mismatched
fingerprints, and how A / B are named (model, folder, FOLDER:MODEL)."""
from __future__ import annotations

import pandas as pd
import pytest
from scipy import stats

from harness.cli import main
from harness.results.compare import compare_runs, resolve_run
from harness.errors import ConfigError
from harness.results.records import make_record, write_record
from harness.results.table import IncomparableResultsError

FP = "d5" * 8
SEEDS = (42, 400, 783)
# dense NN mIoU per (fraction, seed): B beats A by a seed-dependent margin
A_VALUES = {("1/8", 42): 20.0, ("1/8", 400): 21.5, ("1/8", 783): 19.0,
            ("1/1", 42): 30.0, ("1/1", 400): 30.5, ("1/1", 783): 29.0}
GAIN = {42: 1.0, 400: 2.5, 783: 0.5}


def _rec(model: str, fraction: str | None, seed: int | None, metrics: dict, fp: str = FP, protocol="dense_nn",
         variant=None) -> dict:
    m = {"name": model, "method": "dino", "arch": "vit_cpu_tiny", "weights_key": f"w-{model}"}
    p = {"name": protocol, "preset": "synth", "dataset": "voc", "split": "val", "params": {}, "fingerprint": fp}
    return make_record(m, p, seed, variant or {"fraction": fraction}, metrics, {"wall_s": 1.0})


def _runs(model_a="dino", model_b="ibot", drop_b=()):
    a = [_rec(model_a, f, s, {"mIoU": v, "pixel_accuracy": 50.0}) for (f, s), v in A_VALUES.items()]
    b = [_rec(model_b, f, s, {"mIoU": v + GAIN[s], "pixel_accuracy": 52.0}) for (f, s), v in A_VALUES.items()
         if (f, s) not in drop_b]
    for model, records, top1 in ((model_a, a, 40.0), (model_b, b, 43.0)):
        records.append(_rec(model, None, None, {"top1": top1}, fp="e6" * 8, protocol="knn",
                            variant={"k": 20, "feature": "cls"}))
    return a, b


def test_paired_t_test_per_column_and_pooled():
    a, b = _runs()
    table = compare_runs(a, b)
    assert list(table["protocol"]) == ["dense_nn", "dense_nn", "dense_nn", "knn"]
    assert set(table["metric"]) == {"mIoU", "top1"}  # headline metrics only
    row = table[table["variant"] == "fraction=1/8"].iloc[0]
    xa = [A_VALUES[("1/8", s)] for s in SEEDS]
    xb = [x + GAIN[s] for x, s in zip(xa, SEEDS)]
    expected = stats.ttest_rel(xb, xa)
    assert row["delta"] == pytest.approx(sum(GAIN.values()) / 3)
    assert row["pairs"] == 3 and row["seeds"] == "42,400,783"
    assert row["statistic"] == pytest.approx(expected.statistic) and row["p_value"] == pytest.approx(expected.pvalue)
    # the protocol row: per seed the mean over both fractions, the test over the three seeds
    pooled = table[(table["protocol"] == "dense_nn") & (table["variant"] == "all")].iloc[0]
    ya = [(A_VALUES[("1/8", s)] + A_VALUES[("1/1", s)]) / 2 for s in SEEDS]
    yb = [y + GAIN[s] for y, s in zip(ya, SEEDS)]
    assert pooled["pairs"] == 3 and pooled["seeds"] == "42,400,783"
    assert pooled["p_value"] == pytest.approx(stats.ttest_rel(yb, ya).pvalue)
    knn = table[table["protocol"] == "knn"].iloc[0]  # one column, no seed: a delta, no test
    assert knn["delta"] == pytest.approx(3.0) and knn["pairs"] == 1 and pd.isna(knn["p_value"])
    assert "one pair: no test" in knn["note"]


def test_wilcoxon_and_all_metrics():
    a, b = _runs()
    table = compare_runs(a, b, test="wilcoxon", all_metrics=True)
    assert {"mIoU", "pixel_accuracy", "top1"} <= set(table["metric"])
    row = table[(table["variant"] == "fraction=1/1") & (table["metric"] == "mIoU")].iloc[0]
    assert row["p_value"] == pytest.approx(stats.wilcoxon([GAIN[s] for s in SEEDS]).pvalue)
    const = table[(table["variant"] == "fraction=1/1") & (table["metric"] == "pixel_accuracy")].iloc[0]
    assert const["delta"] == pytest.approx(2.0) and pd.isna(const["p_value"]) and "all equal" in const["note"]
    with pytest.raises(ConfigError, match="unknown test"):
        compare_runs(a, b, test="anova")


def test_only_common_seeds_pair_up():
    a, b = _runs(drop_b={("1/8", 783)})
    row = compare_runs(a, b).query("variant == 'fraction=1/8'").iloc[0]
    assert row["pairs"] == 2 and row["seeds"] == "42,400" and row["n_a"] == 3 and row["n_b"] == 2
    assert "seeds in one run only: 783" in row["note"]


def test_mismatched_fingerprints_are_refused():
    a, b = _runs()
    b = [dict(r, protocol=dict(r["protocol"], fingerprint="f7" * 8)) if r["protocol"]["name"] == "dense_nn" else r
         for r in b]
    with pytest.raises(IncomparableResultsError, match="cannot be compared"):
        compare_runs(a, b)


def test_cli_names_models_folders_and_folder_model(tmp_path, capsys):
    a, b = _runs()
    runs = tmp_path / "runs"
    for r in a + b:
        write_record(r, runs)
    out_csv = tmp_path / "cmp.csv"
    assert main(["compare", "dino", "ibot", "--runs", str(runs), "--csv", str(out_csv)]) == 0
    text = capsys.readouterr().out
    assert "paired t-test (scipy.stats.ttest_rel, two-sided)" in text and "delta = mean(B) - mean(A)" in text
    assert "fraction=1/8" in text and "+1.33" in text
    assert len(pd.read_csv(out_csv)) == 4
    # two folders of one model each, and FOLDER:MODEL
    a_dir, b_dir = tmp_path / "a", tmp_path / "b"
    for r in a:
        write_record(r, a_dir)
    for r in b:
        write_record(r, b_dir)
    assert main(["compare", str(a_dir), f"{runs}:ibot", "--test", "wilcoxon"]) == 0
    assert "Wilcoxon signed-rank" in capsys.readouterr().out
    with pytest.raises(ConfigError, match="holds records of 2 models"):
        resolve_run(str(runs))
    with pytest.raises(ConfigError, match="no records of a model named 'mae'.*dino, ibot"):
        resolve_run("mae", runs)
    # mismatched fingerprints: a clear error and exit code 2
    other = tmp_path / "other"
    for r in b:
        if r["protocol"]["name"] == "dense_nn":
            r = dict(r, protocol=dict(r["protocol"], fingerprint="f7" * 8))
        write_record(r, other)
    assert main(["compare", str(a_dir), str(other)]) == 2
    assert "cannot be compared" in capsys.readouterr().err
