"""Leaderboard: pivot, fingerprint refusal, and every output file parses."""
from __future__ import annotations

import functools

import pandas as pd
import pytest
from PIL import Image

from harness.errors import SslBenchError
from harness.leaderboard import (IncomparableResultsError, build_leaderboard, compare,
                                 format_console, write_leaderboard)
from harness.results import make_record, write_record

FP_KNN, FP_DNN, FP_OTHER = "a" * 16, "b" * 16, "c" * 16


def _rec(model, protocol, dataset, metrics, seed=0, variant=None, fp=FP_KNN, split="val"):
    m = {"name": model, "method": model.split("-")[0], "arch": "vit_cpu_tiny",
         "checkpoint_sha256": f"sha-{model}"}
    p = {"name": protocol, "dataset": dataset, "split": split, "params": {}, "fingerprint": fp}
    return make_record(m, p, seed, variant or {}, metrics, {"wall_s": 1.0})


@functools.lru_cache(maxsize=1)
def _cached_records():
    recs = []
    for model, base in (("dino-a", 50.0), ("ibot-b", 60.0)):
        recs.append(_rec(model, "knn", "synth_in", {"top1": base, "top5": base + 20}, variant={"k": 20}))
        for frac, bump in (("1/8", 0.0), ("1/2", 5.0), ("1", 9.0)):
            for seed in (0, 1, 2):
                recs.append(_rec(model, "dense_nn", "synth_voc", {"mIoU": base / 2 + bump + seed, "pixel_acc": 80.0},
                                 seed=seed, variant={"fraction": frac}, fp=FP_DNN))
    return tuple(recs)


def _records():
    return [dict(r) for r in _cached_records()]


def test_pivot_mean_std_n():
    df = build_leaderboard(_records())
    col = ("dense_nn", "synth_voc", "val", "fraction=1/8", "mIoU", FP_DNN)
    assert df.loc["dino-a", col + ("mean",)] == pytest.approx(26.0)
    assert df.loc["dino-a", col + ("std",)] == pytest.approx(1.0)
    assert df.loc["dino-a", col + ("n",)] == 3
    assert not df.attrs["messages"]
    text = format_console(df)
    assert "== knn ==" in text and "26.00 ± 1.00 (n=3)" in text
    assert "top5" not in text and "pixel_acc" not in text  # console: headline metrics only


def test_records_read_from_runs_dir(tmp_path):
    for r in _records():
        write_record(r, tmp_path)
    assert build_leaderboard(runs_dir=tmp_path).shape == build_leaderboard(_records()).shape


def test_mixed_fingerprints_never_share_a_cell():
    recs = _records() + [_rec("mae-c", "knn", "synth_in", {"top1": 10.0}, variant={"k": 20}, fp=FP_OTHER)]
    with pytest.raises(IncomparableResultsError) as exc:
        compare(recs, strict=True)
    assert isinstance(exc.value, SslBenchError)
    assert "cannot be compared" in str(exc.value) and FP_OTHER[:8] in str(exc.value)
    df = compare(recs, strict=False)
    cols = {c[:6] for c in df.columns if c[0] == "knn" and c[4] == "top1"}
    assert {c[5] for c in cols} == {FP_KNN, FP_OTHER}  # two columns, not one merged cell
    assert df.attrs["messages"] and "cannot be compared" in df.attrs["messages"][0]
    text = format_console(df)
    assert "NOT COMPARABLE" in text and f"@{FP_OTHER[:8]}" in text
    compare(_records(), strict=True)  # no conflict: fine


def test_one_model_on_two_data_sets_never_shares_or_hides_a_cell():
    """The same model, protocol and seed on two data roots: two columns, both numbers shown."""
    recs = []
    for stamp, value in (("1111aaaa", 5.26), ("2222bbbb", 3.44)):
        r = _rec("random_init", "dense_nn", "voc", {"mIoU": value}, seed=42, variant={"fraction": "1/1"}, fp=FP_DNN)
        r["protocol"].update(data_root=f"/data/{stamp}", data_stamp=stamp)
        recs.append(r)
    df = build_leaderboard(recs)
    cells = {c[1]: df.loc["random_init", c] for c in df.columns if c[4] == "mIoU" and c[6] == "mean"}
    assert cells == {"voc@1111aaaa": 5.26, "voc@2222bbbb": 3.44}
    one = build_leaderboard(recs[:1])  # a single data set keeps its plain name
    assert {c[1] for c in one.columns} == {"voc"}


def test_outputs_exist_and_parse(tmp_path):
    recs = _records() + [_rec("mae-c", "knn", "synth_in", {"top1": 10.0}, variant={"k": 20}, fp=FP_OTHER)]
    paths = write_leaderboard(recs, tmp_path / "lb")
    wide = pd.read_csv(paths["csv"], index_col=0)
    assert set(wide.index) == {"dino-a", "ibot-b", "mae-c"}
    assert any("top5" in c for c in wide.columns)  # all metrics in the CSV
    long = pd.read_csv(paths["long_csv"])
    assert {"mean", "std", "n", "fingerprint"} <= set(long.columns)
    fps = pd.read_csv(paths["fingerprints_csv"])
    assert set(fps["fingerprint"]) == {FP_KNN, FP_DNN, FP_OTHER}
    page = paths["html"].read_text()
    assert '<table id="leaderboard">' in page and "dino-a" in page and "<script>" in page
    assert "cannot be compared" in page and "http" not in page.split("<body>")[1]  # no external assets
    md = paths["md"].read_text()
    assert "| model |" in md and FP_DNN[:8] in md
    pngs = [p for k, p in paths.items() if k.startswith(("plot_", "curve_"))]
    assert any(k.startswith("curve_dense_nn") for k in paths) and len(pngs) >= 3
    for p in pngs:
        with Image.open(p) as im:
            assert im.format == "PNG" and im.size[0] > 100


def test_empty():
    df = build_leaderboard([])
    assert df.empty and format_console(df) == "no result records found"
