"""One-seed cells get a 95% interval from a seeded bootstrap over the evaluation images
(harness.results.bootstrap) when their record keeps per-image statistics (harness.per_image):
the statistics give back the protocol's number exactly, the interval holds it, the seed fixes
it, the statistics key nothing, and a record without (or with broken) statistics has none."""
from __future__ import annotations

import csv
import io
import logging

import numpy as np
import pytest
import torch

from harness.probes.labelled_features import accuracy_metrics, accuracy_per_image
from benchmarks.classification.knn import weighted_knn
from benchmarks.dense_nn.metric import ConfusionMatrix, compute_miou
from harness.per_image import (PerImageError, areas_block, decode_array, encode_array, hits_block,
                               read_per_image)
from harness.results import bootstrap
from harness.results.leaderboard import build_leaderboard, long_table, to_markdown, write_leaderboard
from harness.results.records import make_record
from harness.results.run_table import CI_NONE, run_table

RESAMPLES, SEED = bootstrap.RESAMPLES, bootstrap.SEED


def _knn_block(n_test: int = 240, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    train, test = torch.randn(300, 16, generator=g), torch.randn(n_test, 16, generator=g)
    tl, vl = torch.randint(0, 6, (300,), generator=g), torch.randint(0, 6, (n_test,), generator=g)
    test = test + 0.8 * torch.nn.functional.one_hot(vl, 16).float()  # some signal, so top-1 is not chance
    train = train + 0.8 * torch.nn.functional.one_hot(tl, 16).float()
    return weighted_knn(train, tl, test, vl, ks=[10], num_classes=6, per_image=True)[10]


def _segmentation(num_classes: int = 5, extra: bool = True, images: int = 40, seed: int = 0) -> ConfusionMatrix:
    rng = np.random.default_rng(seed)
    cm = ConfusionMatrix(num_classes, num_classes + 1 if extra else num_classes)
    for _ in range(images):
        gt = rng.integers(0, num_classes - 1, (12, 12))  # the last class never occurs: an absent class
        gt[0, :] = 255
        pred = np.where(rng.random(gt.shape) < 0.7, gt, rng.integers(0, cm.num_pred, gt.shape))
        pred[gt == 255] = 0
        cm.update(gt, pred)
    cm.update(np.full((4, 4), 255), np.zeros((4, 4), dtype=np.int64))  # an image without labels
    return cm


# ----------------------------------------------------------------------------- the statistics
def test_knn_statistics_give_back_the_metrics_exactly():
    r = _knn_block()
    stats = read_per_image(r["per_image"])
    assert stats.kind == "hits" and stats.metrics == ["top1", "top5"] and stats.images == 240
    ones = np.ones((1, stats.images))
    for m in ("top1", "top5"):
        assert stats.metric_of_weights(ones, m)[0] == r[m]
    assert 20.0 < r["top1"] < 100.0  # not a degenerate case


@pytest.mark.parametrize("absent,ignored", [(False, False), (True, False), (False, True), (True, True)])
def test_dense_statistics_give_back_the_miou_and_accuracy_exactly(absent, ignored):
    cm = _segmentation()
    stats = read_per_image(cm.per_image_block(count_absent_classes=absent, count_ignored_class=ignored))
    want = compute_miou(cm.matrix, count_absent_classes=absent, count_ignored_class=ignored)
    ones = np.ones((1, stats.images))
    assert stats.images == 41
    assert stats.metric_of_weights(ones, "mIoU")[0] == 100.0 * want.miou
    assert stats.metric_of_weights(ones, "pixel_accuracy")[0] == 100.0 * want.pixel_accuracy
    # the per-image counts sum to the dataset's: intersection = diagonal, label = row sums
    areas = decode_array(cm.per_image_block(count_absent_classes=absent, count_ignored_class=ignored)["areas"])
    assert (areas[:, 0].sum(0) == np.diag(cm.matrix[:, :5])).all() and (areas[:, 2].sum(0) == cm.matrix.sum(1)).all()


def test_a_resample_counts_each_drawn_image_as_often_as_it_is_drawn():
    cm = _segmentation(images=6)
    stats = read_per_image(cm.per_image_block(count_absent_classes=False, count_ignored_class=False))
    weights = np.array([[2, 0, 1, 0, 0, 3, 1]])  # images 0, 0, 2, 5, 5, 5, 6
    again = ConfusionMatrix(5, 6)
    rng = np.random.default_rng(0)
    images = []
    for _ in range(6):
        gt = rng.integers(0, 4, (12, 12))
        gt[0, :] = 255
        pred = np.where(rng.random(gt.shape) < 0.7, gt, rng.integers(0, 6, gt.shape))
        pred[gt == 255] = 0
        images.append((gt, pred))
    images.append((np.full((4, 4), 255), np.zeros((4, 4), dtype=np.int64)))
    for i, w in enumerate(weights[0]):
        for _ in range(w):
            again.update(*images[i])
    assert stats.metric_of_weights(weights, "mIoU")[0] == 100.0 * compute_miou(again.matrix).miou


def test_blocks_round_trip_and_stay_compact():
    flags = np.random.default_rng(0).random((5000, 2)) < 0.5
    block = hits_block({"top1": flags[:, 0], "top5": flags[:, 1]})
    assert block["hits"]["dtype"] == "uint8" and len(block["hits"]["data"]) < 4000
    assert (decode_array(block["hits"]) == flags).all()
    big = encode_array(np.array([[70000]]))
    assert big["dtype"] == "uint32" and decode_array(big)[0, 0] == 70000


# ----------------------------------------------------------------------------- the interval
def test_interval_holds_the_number_and_the_seed_fixes_it():
    r = _knn_block()
    stats = read_per_image(r["per_image"])
    ci = bootstrap.intervals(stats, ["top1", "top5"])
    for m in ("top1", "top5"):
        assert ci[m].low < r[m] < ci[m].high
        assert ci[m].high - ci[m].low < 20.0
    assert ci["top1"].method == f"bootstrap over 240 images, {RESAMPLES} resamples, seed {SEED}"
    assert bootstrap.intervals(read_per_image(r["per_image"]), ["top1"])["top1"] == ci["top1"]
    other = bootstrap.intervals(stats, ["top1"], seed=SEED + 1)["top1"]
    assert (other.low, other.high) != (ci["top1"].low, ci["top1"].high) and other.seed == SEED + 1

    cm = _segmentation()
    seg = read_per_image(cm.per_image_block(count_absent_classes=False, count_ignored_class=False))
    point = 100.0 * compute_miou(cm.matrix).miou
    a = bootstrap.intervals(seg, ["mIoU"])["mIoU"]
    assert a.low < point < a.high and a == bootstrap.intervals(seg, ["mIoU"])["mIoU"]
    assert bootstrap.intervals(seg, ["mIoU"], seed=7)["mIoU"] != a


# ----------------------------------------------------------------------------- records and tables
def _record(model: str, value: float, per_image: dict | None, seed: int | None = None, i: int = 0) -> dict:
    proto = {"name": "knn", "preset": "synth", "dataset": "imagefolder", "split": "val", "params": {},
             "fingerprint": "f" * 16, "request": "r" * 16}
    rec = make_record({"name": model, "method": "dino", "arch": "vit_tiny", "weights_key": f"w-{model}"}, proto,
                      seed, {"k": 10, "feature": "cls"}, {"top1": value}, {"wall_s": 1.0}, per_image=per_image)
    rec["created"] = f"2026-01-01T00:00:0{i}+00:00"
    return rec


def test_the_statistics_key_nothing():
    block = _knn_block()["per_image"]
    with_stats, without = _record("a", 50.0, block), _record("a", 50.0, None)
    assert with_stats["id"] == without["id"] and "per_image" not in without
    assert {k: v for k, v in with_stats.items() if k not in ("per_image", "created")} == \
        {k: v for k, v in without.items() if k != "created"}


def test_leaderboard_numbers_are_the_same_with_or_without_statistics(tmp_path):
    r = _knn_block()
    blocks = [r["per_image"], _knn_block(seed=1)["per_image"]]
    values = [r["top1"], 61.25]
    plain = [_record(m, v, None) for m, v in zip("ab", values)]
    kept = [_record(m, v, b) for m, v, b in zip("ab", values, blocks)]
    p1, p2 = write_leaderboard(plain, tmp_path / "plain"), write_leaderboard(kept, tmp_path / "kept")
    for name in ("csv", "md", "fingerprints_csv"):
        assert p1[name].read_text() == p2[name].read_text()
    assert to_markdown(build_leaderboard(plain)) == to_markdown(build_leaderboard(kept))


def test_long_csv_states_the_bootstrap_for_one_seed_and_t_for_several(tmp_path):
    r = _knn_block()
    recs = ([_record("boot", r["top1"], r["per_image"])] + [_record("none", 40.0, None)]
            + [_record("seeds", v, None, seed=s, i=s) for s, v in enumerate((50.0, 52.0, 54.0))])
    rows = {row["model"]: row for row in csv.DictReader(io.StringIO(
        write_leaderboard(recs, tmp_path)["long_csv"].read_text()))}
    boot = rows["boot"]
    assert boot["ci_method"] == f"bootstrap over 240 images, {RESAMPLES} resamples, seed {SEED}"
    assert float(boot["ci95_low"]) < float(boot["mean"]) < float(boot["ci95_high"])
    assert rows["none"]["ci_method"] == CI_NONE and rows["none"]["ci95_low"] == ""
    assert rows["seeds"]["ci_method"] == "t over seeds"
    # the same records, the same interval
    again = long_table(build_leaderboard(recs))
    assert float(again.loc[again.model == "boot", "ci95_low"].item()) == float(boot["ci95_low"])


def test_broken_statistics_are_treated_as_absent_with_one_warning(caplog):
    block = dict(_knn_block()["per_image"])
    block["hits"] = {**block["hits"], "data": block["hits"]["data"][:-12] + "!!!!"}
    rec = _record("broken", 50.0, block)
    with caplog.at_level(logging.WARNING, logger="harness.results.bootstrap"):
        table = long_table(build_leaderboard([rec]))
    assert table["ci_method"].tolist() == [CI_NONE]
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1 and rec["id"] in lines[0] and "per_image" in lines[0]
    with pytest.raises(PerImageError, match="does not decode"):
        read_per_image(block)
    with pytest.raises(PerImageError, match="kind"):
        read_per_image({"kind": "histogram"})
    with pytest.raises(PerImageError, match="does not read"):
        read_per_image({**block, "hits": _knn_block()["per_image"]["hits"], "metrics": 5})


def test_the_best_cannot_be_told_apart_from_an_overlapping_bootstrapped_row():
    flags = np.zeros(400, dtype=bool)
    best, close, far = flags.copy(), flags.copy(), flags.copy()
    best[:240], close[:232], far[:120] = True, True, True  # 60%, 58% and 30% of 400 images
    recs = [_record(m, accuracy_metrics({1: int(f.sum()), 5: 0}, 400, 4)["top1"],
                    accuracy_per_image({1: f, 5: f}, 4)) for m, f in (("best", best), ("close", close), ("far", far))]
    t = run_table(build_leaderboard(recs))
    assert t.tied_with_best(t.keys[0], t.models) == {"close"}


def test_areas_block_states_its_class_averaging():
    cm = _segmentation()
    block = cm.per_image_block(count_absent_classes=True, count_ignored_class=True)
    assert block["count_absent_classes"] is True and block["extra_terms"] == 1
    assert ConfusionMatrix(5).per_image_block(count_absent_classes=False, count_ignored_class=True)["extra_terms"] == 0
    zeros = np.zeros((2, 3), dtype=np.int64)
    assert areas_block(zeros, zeros, zeros, count_absent_classes=False, extra_terms=0)["images"] == 2
    with pytest.raises(ValueError, match="non-negative integers"):
        encode_array(np.array([-1]))
    with pytest.raises(ValueError, match="finite"):
        encode_array(np.array([0.5, np.nan]))


def test_report_shows_the_bootstrap_interval_of_a_one_seed_cell():
    from harness.results.report import build_report

    r = _knn_block()
    recs = [_record("boot", r["top1"], r["per_image"]), _record("none", 40.0, None)]
    page = build_report(recs, paper_tables=[], generated="2026-01-01T00:00:00+00:00")
    assert "(bootstrap)</span>" in page and f"bootstrap over 240 images, {RESAMPLES} resamples" in page
    assert "n=1: no interval" in page


def test_records_keep_their_statistics_through_the_dataframe_api():
    from harness.results.records import load_results, to_records

    rec = _record("a", 50.0, _knn_block()["per_image"])
    assert to_records(load_results([rec])) == [rec]


def test_large_sets_draw_in_chunks_with_the_same_guarantees(monkeypatch):
    cm = _segmentation()
    stats = read_per_image(cm.per_image_block(count_absent_classes=False, count_ignored_class=False))
    point = 100.0 * compute_miou(cm.matrix).miou
    monkeypatch.setattr(bootstrap, "CHUNK", 41 * 7)  # 7 resamples per chunk instead of all at once
    a = bootstrap.intervals(stats, ["mIoU"], resamples=100)["mIoU"]
    assert a.low < point < a.high and a == bootstrap.intervals(stats, ["mIoU"], resamples=100)["mIoU"]


def test_intervals_of_a_folder_are_computed_once_and_kept_beside_its_index(tmp_path, monkeypatch):
    """A records folder's one-seed intervals are kept on disk, keyed by record id, file stamp and
    resample settings: read again, nothing is computed; a rewritten record or other settings
    compute again; the table of the folder has the intervals of the same records as dicts."""
    import json
    import os

    from harness.results.records import write_record

    r = _knn_block()
    recs = [_record("a", r["top1"], r["per_image"]), _record("b", 61.25, _knn_block(seed=1)["per_image"])]
    runs = tmp_path / "runs"
    for rec in recs:
        write_record(rec, runs)
    computed = []
    real = bootstrap.record_intervals
    monkeypatch.setattr(bootstrap, "record_intervals", lambda rid, *a, **k: computed.append(rid) or real(rid, *a, **k))

    def intervals():
        t = build_leaderboard(runs_dir=runs)
        return {t.models[i]: (ci.low, ci.high) for (i, _), ci in t.bootstrapped.items()}

    first = intervals()
    assert sorted(computed) == sorted(rec["id"] for rec in recs)
    assert (runs / ".index" / bootstrap.CACHE_FILE).is_file()
    from_dicts = build_leaderboard(recs)
    assert first == {from_dicts.models[i]: (ci.low, ci.high) for (i, _), ci in from_dicts.bootstrapped.items()}
    computed.clear()
    assert intervals() == first and computed == []  # kept: nothing computed again
    path = runs / f"{recs[0]['id']}.json"
    path.write_text(json.dumps({**recs[0], "per_image": _knn_block(seed=2)["per_image"]}))
    os.utime(path, ns=(path.stat().st_atime_ns, path.stat().st_mtime_ns + 10**9))  # a new stamp
    assert intervals()["a"] != first["a"] and computed == [recs[0]["id"]]  # the changed record alone
    computed.clear()
    t = build_leaderboard(runs_dir=runs)  # other settings: computed under their own key
    found = bootstrap.kept_intervals(t.source, {rid: (file, ["top1"]) for rid, file in t.per_image.values()}, 200)
    assert len(computed) == 2 and all(ci.resamples == 200 for ci in found.values())


def test_a_runs_own_records_keep_their_intervals_beside_the_folder_they_were_written_to(tmp_path, monkeypatch):
    """A suite's table is made of its records as dicts: those whose file is in the run's records
    folder keep their intervals beside its index (computed once, then read), the same intervals
    as computed in memory; a record with no file there is computed every time and keeps nothing."""
    from harness.results.records import write_record
    from harness.results.run_table import table_of_records

    written = _record("a", 50.0, _knn_block()["per_image"])
    loose = _record("b", 61.25, _knn_block(seed=1)["per_image"])
    runs = tmp_path / "runs"
    write_record(written, runs)
    computed = []
    real = bootstrap.record_intervals
    monkeypatch.setattr(bootstrap, "record_intervals", lambda rid, *a, **k: computed.append(rid) or real(rid, *a, **k))

    def intervals(**kw):
        t = table_of_records([written, loose], **kw)
        return {t.models[i]: (ci.low, ci.high) for (i, _), ci in t.bootstrapped.items()}

    in_memory = intervals()
    computed.clear()
    assert intervals(kept_in=runs) == in_memory and sorted(computed) == sorted([written["id"], loose["id"]])
    computed.clear()
    assert intervals(kept_in=runs) == in_memory and computed == [loose["id"]]  # the written one was kept
    computed.clear()
    assert intervals(kept_in=tmp_path / "elsewhere") == in_memory and len(computed) == 2


def test_a_kept_tables_intervals_read_as_arrays_give_what_grouping_afresh_gives(tmp_path):
    """The kept table's intervals are read back as arrays (RunTable.intervals, no dict per
    cell): its bounds, interval methods, per-cell dict and files equal those of the table
    grouped afresh; a record added since (with its own statistics) is not missed."""
    from harness.results.leaderboard import format_console, to_html
    from harness.results.records import write_record

    runs = tmp_path / "runs"
    for rec in (_record("a", 50.0, _knn_block()["per_image"]), _record("b", 61.25, _knn_block(seed=1)["per_image"]),
                _record("c", 55.0, None)):
        write_record(rec, runs)
    fresh = build_leaderboard(runs_dir=runs)  # grouped, intervals computed and kept
    kept = build_leaderboard(runs_dir=runs)
    assert "intervals" in kept.__dict__ and "bootstrapped" not in kept.__dict__  # read as arrays
    for name in ("ci_low", "ci_high", "ci_methods"):
        np.testing.assert_array_equal(getattr(kept, name), getattr(fresh, name))
    assert kept.bootstrapped == fresh.bootstrapped and len(kept.bootstrapped) == 2
    for write in (to_markdown, to_html, format_console, lambda t: long_table(t).to_csv(index=False)):
        assert write(kept) == write(fresh)
    write_record(_record("d", 40.0, _knn_block(seed=3)["per_image"]), runs)  # the kept table is stale
    again = build_leaderboard(runs_dir=runs)
    assert "d" in again.models  # grouped again, not the kept table read
    i = again.models.index("d")
    assert again.ci_methods[i, 0].startswith("bootstrap over") and (i, 0) in again.bootstrapped
    assert build_leaderboard(runs_dir=runs).bootstrapped == again.bootstrapped  # kept again, read as arrays
