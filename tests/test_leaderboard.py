"""Leaderboard: pivot, fingerprint refusal, and every output file parses."""
from __future__ import annotations

import functools

import pandas as pd
import pytest
from PIL import Image

from harness.errors import SslBenchError
from harness.results.leaderboard import (build_leaderboard, compare, format_console, random_init_references,
                                         to_markdown,
                                 write_leaderboard)
from harness.results.records import make_record, write_record
from harness.results.table import IncomparableResultsError

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
    t = build_leaderboard(_records())
    df = t.frame
    col = ("dense_nn", "synth_voc", "val", "fraction=1/8", "mIoU", FP_DNN)
    assert df.loc["dino-a", col + ("mean",)] == pytest.approx(26.0)
    assert df.loc["dino-a", col + ("std",)] == pytest.approx(1.0)
    assert df.loc["dino-a", col + ("n",)] == 3
    assert t.cell("dino-a", col) == pytest.approx((26.0, 1.0, 3))
    assert not t.messages
    text = format_console(t)
    assert "== knn ==" in text and "26.00 ± 1.00 (n=3)" in text
    assert "top5" not in text and "pixel_acc" not in text  # console: headline metrics only


def test_records_read_from_runs_dir(tmp_path):
    for r in _records():
        write_record(r, tmp_path)
    from_folder, from_dicts = build_leaderboard(runs_dir=tmp_path), build_leaderboard(_records())
    assert from_folder.frame.equals(from_dicts.frame)  # the index's number rows: the same table
    assert from_folder.model_info == from_dicts.model_info and from_folder.messages == from_dicts.messages


def test_mixed_fingerprints_never_share_a_cell():
    recs = _records() + [_rec("mae-c", "knn", "synth_in", {"top1": 10.0}, variant={"k": 20}, fp=FP_OTHER)]
    with pytest.raises(IncomparableResultsError) as exc:
        compare(recs, strict=True)
    assert isinstance(exc.value, SslBenchError)
    assert "cannot be compared" in str(exc.value) and FP_OTHER[:8] in str(exc.value)
    t = compare(recs, strict=False)
    cols = {c for c in t.keys if c[0] == "knn" and c[4] == "top1"}
    assert {c[5] for c in cols} == {FP_KNN, FP_OTHER}  # two columns, not one merged cell
    assert t.messages and "cannot be compared" in t.messages[0]
    text = format_console(t)
    assert "NOT COMPARABLE" in text and f"@{FP_OTHER[:8]}" in text
    compare(_records(), strict=True)  # no conflict: fine


def test_one_model_on_two_data_sets_never_shares_or_hides_a_cell():
    """The same model, protocol and seed on two data roots: two columns, both numbers shown."""
    recs = []
    for stamp, value in (("1111aaaa", 5.26), ("2222bbbb", 3.44)):
        r = _rec("random_init", "dense_nn", "voc", {"mIoU": value}, seed=42, variant={"fraction": "1/1"}, fp=FP_DNN)
        r["protocol"].update(data_root=f"/data/{stamp}", data_stamp=stamp)
        recs.append(r)
    t = build_leaderboard(recs)
    cells = {c[1]: t.cell("random_init", c)[0] for c in t.keys if c[4] == "mIoU"}
    assert cells == {"voc@1111aaaa": 5.26, "voc@2222bbbb": 3.44}
    one = build_leaderboard(recs[:1])  # a single data set keeps its plain name
    assert {c[1] for c in one.keys} == {"voc"}


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    """The leaderboard's files of three models, written once: each test reads its files."""
    recs = _records() + [_rec("mae-c", "knn", "synth_in", {"top1": 10.0}, variant={"k": 20}, fp=FP_OTHER)]
    return write_leaderboard(recs, tmp_path_factory.mktemp("lb"))


def test_outputs_exist_and_parse(written):
    paths = written
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


def _with_random_init():
    """The test records plus a random-init row (its records say so: model method random_init)."""
    recs = _records() + [_rec("random_init-x", "knn", "synth_in", {"top1": 33.0, "top5": 40.0}, variant={"k": 20})]
    for frac in ("1/8", "1/2", "1"):
        for seed in (0, 1, 2):
            recs.append(_rec("random_init-x", "dense_nn", "synth_voc", {"mIoU": 10.0 + seed, "pixel_acc": 80.0},
                             seed=seed, variant={"fraction": frac}, fp=FP_DNN))
    return recs


def test_markdown_has_one_table_per_protocol_headline_first_best_bold_delta_to_random_init():
    md = to_markdown(build_leaderboard(_with_random_init()))
    sections = md.split("\n## ")
    assert sections[1].startswith("Overview")  # the one-screen overview first (tests/test_overview.py)
    sections = sections[:1] + sections[2:]
    assert [s.splitlines()[0] for s in sections[1:3]] == ["dense_nn · synth_voc/val", "knn · synth_in/val"]
    dense = sections[1].splitlines()
    header = next(line for line in dense if line.startswith("| model |"))
    # readable headers, the headline metric (mIoU) before the secondary one
    assert header == ("| model | mIoU 1/8 | mIoU 1/2 | mIoU 1 | pixel_acc 1/8 | pixel_acc 1/2 | pixel_acc 1 |")
    rows = {line.split(" | ")[0][2:]: line.split(" | ")[1:] for line in dense if line.startswith("| ") and
            not line.startswith("| model")}
    assert rows["ibot-b"][0] == "**31.00** ± 1.00 (n=3) Δ +20.00"  # best in bold, delta to random init
    assert rows["dino-a"][0] == "26.00 ± 1.00 (n=3) Δ +15.00"
    assert rows["random_init-x"][0] == "11.00 ± 1.00 (n=3)"  # the reference has no delta
    assert "Δ" not in rows["dino-a"][3] and "**" not in rows["dino-a"][3]  # secondary, all equal: no mark
    knn = sections[2]
    assert "| model | top1 k=20 | top5 k=20 |" in knn
    assert "| ibot-b | **60.00** (n=1) Δ +27.00 | **80.00** (n=1) |" in knn


def test_console_marks_best_and_shows_delta_per_protocol_table():
    text = format_console(build_leaderboard(_with_random_init()))
    assert "== dense_nn ==  synth_voc/val" in text and "== knn ==  synth_in/val" in text
    assert "31.00* ± 1.00 (n=3) Δ +20.00" in text and "60.00* (n=1) Δ +27.00" in text
    assert "random_init-x" in text and "difference to the random-init row (random_init-x)" in text
    assert "pixel_acc" not in text and "top5" not in text


def test_random_init_is_found_from_the_records_not_the_name():
    recs = _records()
    for r in recs:
        if r["model"]["name"] == "dino-a":
            r["model"]["method"] = "random_init"  # the record field decides, whatever the name
    refs = random_init_references(build_leaderboard(recs))
    assert refs == {"ibot-b": "dino-a"}


def test_only_method_rows_get_a_delta_context_rows_are_references():
    recs = _records()
    for name, context in (("random-r", "random_init"), ("supervised-s", "supervised"), ("chance-c", "chance")):
        rec = _rec(name, "knn", "synth_in", {"top1": 40.0}, variant={"k": 20})
        rec["model"]["context"] = context
        recs.append(rec)
    for r in recs:
        if r["model"]["name"] == "dino-a":
            r["model"]["context"] = None  # a method's model, whatever its method field says
            r["model"]["method"] = "random_init"
    refs = random_init_references(build_leaderboard(recs))
    assert refs == {"dino-a": "random-r", "ibot-b": "random-r"}


def test_leaderboard_csv_is_unchanged(written):
    assert written["csv"].read_text() == (
        "model,dense_nn | synth_voc/val | fraction=1/8 | mIoU,dense_nn | synth_voc/val | fraction=1/8 | pixel_acc,"
        "dense_nn | synth_voc/val | fraction=1/2 | mIoU,dense_nn | synth_voc/val | fraction=1/2 | pixel_acc,"
        "dense_nn | synth_voc/val | fraction=1 | mIoU,dense_nn | synth_voc/val | fraction=1 | pixel_acc,"
        "knn | synth_in/val | k=20 | top1 @aaaaaaaa,knn | synth_in/val | k=20 | top1 @cccccccc,"
        "knn | synth_in/val | k=20 | top5\n"
        "dino-a,26.0,80.0,31.0,80.0,35.0,80.0,50.0,,70.0\n"
        "ibot-b,31.0,80.0,36.0,80.0,40.0,80.0,60.0,,80.0\n"
        "mae-c,,,,,,,,10.0,\n")
