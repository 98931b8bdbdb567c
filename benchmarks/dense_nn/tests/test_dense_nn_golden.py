"""Golden parity with open-hummingbird-eval v2.0.0 on seeded features and masks.

The expected numbers in benchmarks/dense_nn/fixtures/hbird_golden.json were produced once by running
the reference's own evaluation code (HbirdEvaluation, PredsmIoU) on exactly the arrays
`make_case` builds here; the fixture's "how" field describes the procedure. Only numbers
and seeds are committed.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from benchmarks.dense_nn.protocol import PRESETS, dense_nn_from_features

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "hbird_golden.json"

# Each case: the reference's label convention ("voc": 0..C-1 + 255 ignore; "ade": raw
# ADE20K, 0 = other (ignored in the metric), 1..C-1 classes) and the generator settings.
CASES = {
    "voc_unbounded": dict(kind="voc", seed=11, n_train=16, n_val=6, grid=8, patch=8, dim=32,
                          num_classes=21, k=30, memory_size=None),
    "ade_unbounded": dict(kind="ade", seed=23, n_train=16, n_val=6, grid=8, patch=8, dim=32,
                          num_classes=12, k=30, memory_size=None),
    "voc_memory_cap": dict(kind="voc", seed=37, n_train=20, n_val=6, grid=8, patch=8, dim=32,
                           num_classes=21, k=10, memory_size=500, rand_seed=1234),
}


def make_case(spec: dict) -> dict:
    """Seeded features and masks in the reference's conventions.

    Masks: a background ("stuff") class with 1-3 discs of other classes; for "voc" a
    one-pixel ring of 255 around each disc (VOC's object boundaries). Features: per patch,
    the class-histogram-weighted mean of per-class prototypes plus Gaussian noise, so that
    neighbours are informative but not perfect.
    """
    rng = np.random.default_rng(spec["seed"])
    c, s, p, d = spec["num_classes"], spec["grid"], spec["patch"], spec["dim"]
    size = s * p
    first = 1 if spec["kind"] == "ade" else 0  # ADE: raw 0 = other, real classes 1..c-1
    protos = rng.standard_normal((c, d)).astype(np.float32)
    yy, xx = np.mgrid[0:size, 0:size] + 0.5

    def one(n):
        feats, masks = [], []
        for _ in range(n):
            m = np.full((size, size), rng.integers(first, c), dtype=np.int64)
            if spec["kind"] == "ade":
                # some "other" pixels: a band along one border
                m[: int(rng.integers(0, size // 4)), :] = 0
            for _ in range(int(rng.integers(1, 4))):
                cy, cx = rng.uniform(0, size, 2)
                r = rng.uniform(size / 8, size / 3)
                dist = np.sqrt((yy - cy) ** 2 + (xx - cx) ** 2)
                m[dist <= r] = rng.integers(first, c)
                if spec["kind"] == "voc":
                    m[np.abs(dist - r) < 0.7] = 255
            hist = np.zeros((s, s, c), np.float32)
            valid = m != 255
            for k in range(c):
                hist[..., k] = ((m == k) & valid).reshape(s, p, s, p).mean(axis=(1, 3))
            f = hist @ protos + 0.8 * rng.standard_normal((s, s, d)).astype(np.float32)
            feats.append(f.astype(np.float32))
            masks.append(m.astype(np.uint8))
        return feats, masks

    tf, tm = one(spec["n_train"])
    vf, vm = one(spec["n_val"])
    return {"train_feats": tf, "train_masks": tm, "val_feats": vf, "val_masks": vm}


def to_harness_masks(masks: list[np.ndarray], kind: str) -> list[np.ndarray]:
    """Reference -> this harness: ADE20K gets reduce_zero_label (0 -> 255, k -> k-1)."""
    if kind != "ade":
        return masks
    out = []
    for m in masks:
        r = m.astype(np.int64) - 1
        r[m == 0] = 255
        out.append(r.astype(np.uint8))
    return out


def harness_config(spec: dict, *, hungarian: bool) -> dict:
    """The hbird preset with augmentation disabled, float32 bank, the reference's metric."""
    return {"preset": "hbird", "dataset": "ade20k" if spec["kind"] == "ade" else "voc",
            "resize": "square", "bank_augment": "none", "label_mode": "soft", "vote_mode": "softmax",
            "temperature": 0.02, "upsample": "bilinear", "bank_ignore": "hbird", "bank_dtype": "float32",
            "k": spec["k"], "memory_size": spec["memory_size"], "hungarian": hungarian,
            "count_absent_classes": True, "count_ignored_class": spec["kind"] == "ade",
            "search_chunk": spec["n_val"] * spec["grid"] ** 2, "threads": 1}


def _case_rand(spec: dict):
    """The memory cap's U(0, 1) draws: one stream over the images in order (None: the default)."""
    if spec.get("rand_seed") is None:
        return None
    g = torch.Generator().manual_seed(spec["rand_seed"])
    return lambda i: (lambda n: torch.rand(n, generator=g))


def run_harness(name: str, *, hungarian: bool) -> dict:
    spec = CASES[name]
    case = make_case(spec)
    rand = _case_rand(spec)
    num_classes = spec["num_classes"] - (1 if spec["kind"] == "ade" else 0)
    return dense_nn_from_features(case["train_feats"], to_harness_masks(case["train_masks"], spec["kind"]),
                                  case["val_feats"], to_harness_masks(case["val_masks"], spec["kind"]),
                                  harness_config(spec, hungarian=hungarian), num_classes=num_classes,
                                  ignore_index=255, rand=rand)


def _golden() -> dict:
    # A missing fixture fails the parity tests: skipping would turn a deleted reference into a
    # green run.
    assert FIXTURE.is_file(), (f"{FIXTURE} is missing: the committed open-hummingbird-eval golden numbers "
                               f"are gone; restore it from git (it cannot be regenerated from this repository)")
    return json.loads(FIXTURE.read_text())


@pytest.mark.parametrize("name", sorted(CASES))
def test_hbird_parity_hungarian(name):
    ref = _golden()["cases"][name]
    assert ref["spec"] == json.loads(json.dumps(CASES[name]))
    got = run_harness(name, hungarian=True)
    assert abs(got["mIoU"] / 100 - ref["miou_hungarian"]) < 1e-6
    assert got["bank_size"] == ref["memory_rows"]


@pytest.mark.parametrize("name", sorted(CASES))
def test_hbird_parity_identity_mapping(name):
    ref = _golden()["cases"][name]
    got = run_harness(name, hungarian=False)
    assert abs(got["mIoU"] / 100 - ref["miou_identity"]) < 1e-6


# The hbird preset's own defaults, only augmentation off (the fixture's features are the inputs):
# the number open-hummingbird-eval returns, and the opt-in plain mIoU on the same confusion matrix.
# mIoU in percent, rounded to 4 decimals: (preset default = reference, plain mIoU).
PRESET_VS_PLAIN = {"voc_unbounded": (35.6064, 39.9540), "ade_unbounded": (67.3730, 89.8306),
                   "voc_memory_cap": (46.4100, 54.1450)}
PLAIN = {"hungarian": False, "count_absent_classes": False, "count_ignored_class": False}


def run_preset(name: str, **over) -> dict:
    spec = CASES[name]
    case = make_case(spec)
    rand = _case_rand(spec)
    cfg = dict(PRESETS["hbird"], dataset="ade20k" if spec["kind"] == "ade" else "voc", bank_augment="none",
               k=spec["k"], memory_size=spec["memory_size"], search_chunk=spec["n_val"] * spec["grid"] ** 2,
               threads=1, **over)
    num_classes = spec["num_classes"] - (1 if spec["kind"] == "ade" else 0)
    return dense_nn_from_features(case["train_feats"], to_harness_masks(case["train_masks"], spec["kind"]),
                                  case["val_feats"], to_harness_masks(case["val_masks"], spec["kind"]), cfg,
                                  num_classes=num_classes, ignore_index=255, rand=rand)


@pytest.mark.parametrize("name", sorted(CASES))
def test_hbird_preset_defaults_give_the_reference_number(name):
    """Without any metric setting, the hbird preset returns what open-hummingbird-eval's
    evaluate() returns (Hungarian matching, mean over every class, ADE20K's "other" counted)."""
    ref = _golden()["cases"][name]
    got = run_preset(name)
    assert abs(got["mIoU"] / 100 - ref["miou_hungarian"]) < 1e-6
    plain = run_preset(name, **PLAIN)
    assert (round(got["mIoU"], 4), round(plain["mIoU"], 4)) == PRESET_VS_PLAIN[name]


def test_hbird_preset_normalises_with_the_reference_std():
    """hbird/utils/transforms.py IMAGENET_STD = [0.229, 0.224, 0.255] (0.255: a typo for 0.225),
    used by both its train and val transforms."""
    assert PRESETS["hbird"]["norm_mean"] == [0.485, 0.456, 0.406]
    assert PRESETS["hbird"]["norm_std"] == [0.229, 0.224, 0.255]
