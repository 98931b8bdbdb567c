"""The mmseg protocols keep each validation image's areas (harness.openmmlab.metric's
SslBenchIoUMetric): their sums give back IoUMetric's mIoU and aAcc as it rounds them, and a one-seed seg cell gets a
bootstrap interval over the validation images from them."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from benchmarks.segmentation import seg_protocol
from benchmarks.segmentation.config import SegConfig
from harness.openmmlab.metric import register_metric
from harness.per_image import read_per_image
from harness.results import bootstrap
from harness.results.leaderboard import build_leaderboard, long_table
from harness.results.records import make_record
from harness.results.run_table import run_table


def _samples(images: int, classes: int, seed: int, absent: int = 0, ignore: int = 255):
    """Ground truth with an ignored band and without the class before the last ``absent`` ones,
    predictions right ~60%; the last ``absent`` classes occur in neither."""
    g = torch.Generator().manual_seed(seed)
    seen = classes - absent
    out = []
    for i in range(images):
        h, w = 12 + i % 5, 16
        gt = torch.randint(0, seen - 1, (h, w), generator=g)  # class seen-1: predicted, never true (IoU 0)
        gt[0, :] = ignore
        pred = torch.where(torch.rand(h, w, generator=g) < 0.6, gt, torch.randint(0, seen, (h, w), generator=g))
        out.append({"pred_sem_seg": {"data": pred[None]}, "gt_sem_seg": {"data": gt[None]}})
    return out


@pytest.fixture(scope="module")
def metric_class():
    pytest.importorskip("mmseg")
    register_metric()
    from mmseg.registry import METRICS

    return METRICS.get("SslBenchIoUMetric")


def _validate(metric_class, tmp_path, images=30, classes=6, seed=0, absent=0):
    path = tmp_path / "per_image.json"
    metric = metric_class(iou_metrics=["mIoU"], per_image_path=str(path))  # mmseg's mIoU also gives aAcc, mAcc
    metric.dataset_meta = {"classes": [f"c{i}" for i in range(classes)]}
    metric.process({}, _samples(images, classes, seed, absent))
    return metric.compute_metrics(metric.results), json.loads(path.read_text())


def test_the_areas_give_back_mmseg_s_numbers(metric_class, tmp_path):
    metrics, block = _validate(metric_class, tmp_path)
    stats = read_per_image(block)
    assert stats.images == 30 and block["metrics"] == ["mIoU", "aAcc", "mAcc"]
    ones = np.ones((1, stats.images))
    # IoUMetric rounds to two decimals (a float32); the statistics keep the unrounded value
    assert round(float(stats.metric_of_weights(ones, "mIoU")[0]), 2) == round(float(metrics["mIoU"]), 2)
    assert round(float(stats.metric_of_weights(ones, "aAcc")[0]), 2) == round(float(metrics["aAcc"]), 2)
    assert round(float(stats.metric_of_weights(ones, "mAcc")[0]), 2) == round(float(metrics["mAcc"]), 2)
    other, _ = _validate(metric_class, tmp_path / "b", seed=1)
    assert other["mIoU"] != metrics["mIoU"]  # the check above is not of a constant


def test_a_class_absent_from_truth_and_prediction_is_left_out_as_mmseg_does(metric_class, tmp_path):
    metrics, block = _validate(metric_class, tmp_path, classes=8, absent=2)
    stats = read_per_image(block)
    union = stats.rows[:, 8:16].sum(0)
    assert not stats.count_absent_classes and (union == 0).tolist() == [False] * 6 + [True] * 2
    assert round(float(stats.metric_of_weights(np.ones((1, stats.images)), "mIoU")[0]), 2) == \
        round(float(metrics["mIoU"]), 2)


def test_seg_records_carry_the_block_and_get_a_bootstrap_interval(metric_class, tmp_path):
    metrics, block = _validate(metric_class, tmp_path)
    cfg = SegConfig(dataset="synth_ade", lrs=[1e-3, 1e-2])
    runs = [{"lr": lr, "metrics": {"mIoU": float(metrics["mIoU"]) - d, "aAcc": float(metrics["aAcc"])}, "iters": 8,
             "num_classes": 6, "train_lists": [], "synthetic": True, "validations": [[8, 1.0]],
             "reported_iter": 8, "csv": "x.csv", "validation_log": "v.jsonl", "work_dir": str(tmp_path),
             "per_image": str(tmp_path / "per_image.json") if d == 0 else str(tmp_path / "missing.json")}
            for lr, d in ((1e-3, 0.0), (1e-2, 1.0))]
    results = seg_protocol.to_results(runs, cfg)
    by_lr = {r.variant["lr"]: r for r in results}
    assert by_lr[1e-3].per_image == block and by_lr[1e-2].per_image is None  # a run without the file: none
    assert by_lr["best"].per_image == block  # the best lr's images
    model = {"name": "m", "method": "dino", "arch": "vit", "weights_key": "w"}
    proto = {"name": "seg_linear", "dataset": "synth_ade", "split": "val", "fingerprint": "f" * 16, "params": {}}
    recs = [make_record(model, proto, r.seed, r.variant, r.metrics, {}, per_image=r.per_image) for r in results]
    long = long_table(run_table(build_leaderboard(recs)))
    best = long[(long["variant"] == "lr=best") & (long["metric"] == "mIoU")].iloc[0]
    assert best["ci_method"].startswith("bootstrap over 30 images")
    assert best["ci95_low"] < best["mean"] < best["ci95_high"]
    want = bootstrap.intervals(read_per_image(block), ["mIoU"])["mIoU"]
    assert (best["ci95_low"], best["ci95_high"]) == pytest.approx((want.low, want.high))
    unkept = long[(long["variant"] == "lr=0.01") & (long["metric"] == "mIoU")].iloc[0]
    assert unkept["ci_method"].startswith("none")
