"""Whole sweeps in the report (harness/results/sweeps.py): every value of a swept setting that
records keep as ``<metric>_by_<setting>``, a row per model and per setting that tells its runs
apart (the lr x wd grid of linear probes at several weight decays), means over seeds."""
from __future__ import annotations

import copy

import pytest

from harness.protocol_info import build_protocol
from harness.results.records import make_record
from harness.results.report import build_report
from harness.results.sweeps import find_sweeps

BASE_LRS = [0.01, 0.03, 0.1]


def _linear(model: str, wd: float, seed: int, by_lr: dict[str, float]) -> dict:
    proto = build_protocol("linear", "synth", {"dataset": "imagefolder", "weight_decay": wd, "base_lrs": BASE_LRS,
                                               "seed": seed})
    best = max(by_lr, key=by_lr.get)
    block = {"name": "linear", "preset": "synth", "dataset": "imagefolder", "split": "val",
             "params": {**proto.settings(), "best_base_lr": float(best), "top1_by_base_lr": by_lr, "seconds": 1.0},
             "fingerprint": proto.fingerprint(), "request": proto.request_hash(), "data_root": "/d",
             "data_stamp": "s1"}
    model_block = {"name": model, "method": "dino", "arch": "vit_cpu_tiny", "weights_key": f"w-{model}"}
    return make_record(model_block, block, seed, {"recipe": "synth", "cached_features": True},
                       {"top1": by_lr[best]}, {"wall_s": 1.0, "device_type": "cpu"})


def _grid() -> list[dict]:
    recs = []
    for model, base in (("dino", 40.0), ("ibot", 45.0)):
        for wd, bump in ((0.0, 0.0), (1e-4, 1.0)):
            for seed in (0, 1):
                recs.append(_linear(model, wd, seed, {"0.01": base + bump + seed, "0.03": base + 5 + bump + seed,
                                                      "0.1": base + 2 + bump}))
    return recs


def test_linear_lr_by_wd_grid():
    (s,) = find_sweeps(_grid())
    assert (s.protocol, s.metric, s.setting, s.values) == ("linear", "top1", "base_lr", ["0.01", "0.03", "0.1"])
    assert [(r.model, r.settings) for r in s.rows] == [("dino", "weight_decay=0.0"), ("dino", "weight_decay=0.0001"),
                                                       ("ibot", "weight_decay=0.0"), ("ibot", "weight_decay=0.0001")]
    row = s.rows[1]  # dino, wd 1e-4: the mean over the two seeds
    assert row.cells["0.01"] == [41.0, 42.0] and row.means()["0.03"] == pytest.approx(46.5)


def test_seg_lr_sweep_from_the_best_record():
    proto = build_protocol("seg_linear", "synth", {"dataset": "synth_ade", "lrs": [1e-3, 1e-2]})
    by_lr = {"0.001": 20.0, "0.01": 25.0}
    recs = []
    for variant, miou in (({"lr": 1e-3}, 20.0), ({"lr": 1e-2}, 25.0), ({"lr": "best"}, 25.0)):
        params = {**proto.settings(), "lr": 1e-2 if variant["lr"] == "best" else variant["lr"]}
        if variant["lr"] == "best":
            params.update(best_lr=1e-2, mIoU_by_lr=by_lr)
        block = {"name": "seg_linear", "dataset": "synth_ade", "split": "val", "params": params,
                 "fingerprint": proto.fingerprint(), "request": proto.request_hash()}
        recs.append(make_record({"name": "dino", "weights_key": "w"}, block, 0, variant, {"mIoU": miou}, {}))
    (s,) = find_sweeps(recs)
    assert (s.setting, s.values, s.rows[0].settings) == ("lr", ["0.001", "0.01"], "")
    assert s.rows[0].means() == by_lr


def test_report_shows_every_cell_and_changes_no_record():
    recs = _grid()
    before = copy.deepcopy(recs)
    page = build_report(recs, paper_tables=[])
    assert recs == before
    assert 'id="sweeps"' in page and 'href="#sweeps"' in page and "top1 by base_lr" in page
    assert page.count("<td class=\"text\">weight_decay=0.0001</td>") == 2
    assert '<td class="best">46.50 (n=2)</td>' in page  # dino, wd 1e-4, base lr 0.03


def test_no_sweep_no_section():
    rec = _linear("dino", 0.0, 0, {"0.01": 40.0})  # one value: nothing swept
    page = build_report([rec], paper_tables=[])
    assert 'id="sweeps"' not in page and find_sweeps([rec]) == []
