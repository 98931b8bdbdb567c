"""Weighted k-NN (benchmarks/classification/knn.py): parity with DINO's knn_classifier on committed golden
numbers, the vote weighting and the tie rules by hand, chunking, and the protocol end to end."""
from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from harness.per_image import read_per_image
from benchmarks.classification.knn import KNNProtocol, Rows, class_scores, cosine_topk, weighted_knn
from harness.models.handle import ModelHandle
from image_folders import make_image_folder

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "knn_dino_golden.json"
GOLDEN = json.loads(FIXTURE.read_text())


def golden_features(case):
    """The seeded features of a golden case (the recipe in the fixture's "how").

    Built from integers only (numpy's PCG64 stream; an Irwin-Hall sum of 12 uniforms on a 2^-12
    grid as the Gaussian), so every value and sum is exact in float64 and float32: the same
    bits on any CPU, where torch.randn's vectorised log/cos differ between kernel sets."""
    rng = np.random.default_rng(case["seed"])
    c, dim = case["num_classes"], case["dim"]

    def gauss(n):
        z = np.zeros((n, dim), np.int32)
        for _ in range(12):
            z += rng.integers(0, 4096, (n, dim), dtype=np.int16)
        return (z - 6 * 4096).astype(np.float64) / 4096

    means = gauss(c)
    train_labels = rng.integers(0, c, case["n_train"])
    test_labels = rng.integers(0, c, case["n_test"])
    train = means[train_labels] + case["noise"] * gauss(case["n_train"])
    test = means[test_labels] + case["noise"] * gauss(case["n_test"])
    return (torch.from_numpy(train.astype(np.float32)), torch.from_numpy(train_labels),
            torch.from_numpy(test.astype(np.float32)), torch.from_numpy(test_labels))


def features_sha256(*tensors) -> str:
    h = hashlib.sha256()
    for t in tensors:
        a = np.ascontiguousarray(t.numpy())
        h.update(str(a.dtype).encode() + str(a.shape).encode() + a.tobytes())
    return h.hexdigest()


# ----------------------------------------------------------------------------- golden parity
def _parity_params():
    for case in GOLDEN["cases"]:
        for backend in ("faiss", "torch"):
            # the 20,000 x 1,000-class case runs once in the fast suite (torch: this faiss
            # wheel loads without AVX2 and is the slower backend here)
            marks = [pytest.mark.slow] if case["num_classes"] >= 1000 and backend == "faiss" else []
            yield pytest.param(case, backend, marks=marks, id=f"{case['name']}-{backend}")


@pytest.mark.parametrize("case,backend", list(_parity_params()))
def test_parity_with_dino_knn_classifier(case, backend):
    train, train_labels, test, test_labels = golden_features(case)
    # exact on any CPU (integer-derived, see golden_features), so compared by hash
    assert features_sha256(train, train_labels, test, test_labels) == case["features_sha256"], \
        "the golden features' recipe or numpy's random stream changed: regenerate the fixture"
    # Unnormalised features in: normalisation is part of the protocol. Small chunks exercise merging.
    res = weighted_knn(train.numpy(), train_labels.numpy(), test.numpy(), test_labels.numpy(),
                       ks=[10, 20, 100, 200], temperature=case["temperature"], num_classes=case["num_classes"],
                       backend=backend, train_chunk=8192, test_chunk=300)
    n = case["n_test"]
    for k, ref in case["dino"].items():
        got = res[int(k)]
        assert got["top1"] == ref["top1"], f"k={k}"  # to the last digit
        dino_hits5 = round(ref["top5"] * n / 100.0)
        assert got["top5"] == (dino_hits5 - ref["top5_zero_vote_hits"]) * 100.0 / n, f"k={k}"
        if ref["top5_zero_vote_hits"] == 0:
            assert got["top5"] == ref["top5"]


# Float32 similarities of unit vectors are within about 1e-6 of the exact ones on any CPU
# (d <= 384 products, each rounded at 6e-8), and class scores (sums of exp(sim / T) with
# T >= 0.07) within about 2e-5 relative. The golden top-1 counts are compared exactly,
# which holds on any CPU only if no decision lies that close to a tie: checked here in float64.
SIM_EPS, SCORE_REL_EPS = 1e-6, 2e-5


@pytest.mark.parametrize("case", [pytest.param(c, id=c["name"], marks=[pytest.mark.slow] if c["num_classes"] >= 1000
                                               else []) for c in GOLDEN["cases"]])
def test_golden_top1_has_no_decision_within_rounding_of_a_tie(case):
    train, train_labels, test, test_labels = golden_features(case)
    train = torch.nn.functional.normalize(train.double(), dim=1)
    test = torch.nn.functional.normalize(test.double(), dim=1)
    top, idx = (test @ train.T).topk(max(map(int, case["dino"])) + 1, dim=1)
    c, T = case["num_classes"], case["temperature"]

    def predictions(sims, rows):
        scores = torch.zeros(len(sims), c, dtype=torch.float64).scatter_add_(1, train_labels[rows], (sims / T).exp())
        two = scores.topk(2, dim=1).values
        return scores.argmax(1), (two[:, 0] - two[:, 1]) / two[:, 0]

    for k in map(int, case["dino"]):
        pred, gap = predictions(top[:, :k], idx[:, :k])
        assert gap.min() > SCORE_REL_EPS, f"k={k}: a class-score near tie"
        near = (top[:, k - 1] - top[:, k]) < SIM_EPS  # the k-th neighbour could swap with the next
        if near.any():
            swapped = torch.cat([idx[near, :k - 1], idx[near, k:k + 1]], dim=1)
            alt, _ = predictions(torch.cat([top[near, :k - 1], top[near, k:k + 1]], dim=1), swapped)
            hits = test_labels[near]
            assert torch.equal(alt == hits, pred[near] == hits), f"k={k}: a neighbour at a near tie decides a hit"


def test_golden_cases_cover_the_zero_vote_quirk():
    # At least one committed case shows DINO counting a class with no vote as a top-5 hit.
    assert any(v["top5_zero_vote_hits"] > 0 for c in GOLDEN["cases"] for v in c["dino"].values())


# ----------------------------------------------------------------------------- weighting by hand
def test_vote_weight_is_exp_sim_over_t():
    # query e1; train: e1 (class 0), two copies of (0.6, 0.8) (class 1): sims 1, 0.6, 0.6
    train = np.array([[1, 0], [0.6, 0.8], [0.6, 0.8]], np.float32)
    labels = np.array([0, 1, 1])
    test = np.array([[1, 0]], np.float32)
    sims, idx = cosine_topk(train, test, 3, backend="torch")
    assert idx.tolist() == [[0, 1, 2]]
    s = float(sims[0, 1])
    assert s == pytest.approx(0.6, abs=1e-6)
    for T in (0.07, 1.0):
        scores = class_scores(sims, torch.as_tensor(labels)[idx], 3, T, 2)
        assert scores[0, 0].item() == pytest.approx(math.exp(1.0 / T), rel=1e-6)
        assert scores[0, 1].item() == pytest.approx(2 * math.exp(s / T), rel=1e-6)
    # T = 0.07: one very close neighbour outweighs two far ones; T = 1: the majority wins.
    r = weighted_knn(train, labels, test, np.array([0]), ks=[3], temperature=0.07, num_classes=2)
    assert r[3]["top1"] == 100.0
    r = weighted_knn(train, labels, test, np.array([0]), ks=[3], temperature=1.0, num_classes=2)
    assert r[3]["top1"] == 0.0
    assert "top5" not in r[3]  # fewer than 5 classes: top-5 is not reported


def test_k_sweep_uses_prefixes_of_one_search():
    rng = np.random.default_rng(0)
    train, test = rng.standard_normal((300, 8)).astype(np.float32), rng.standard_normal((40, 8)).astype(np.float32)
    tl, vl = rng.integers(0, 6, 300), rng.integers(0, 6, 40)
    sweep = weighted_knn(train, tl, test, vl, ks=[1, 5, 17, 300], num_classes=6)
    for k in (1, 5, 17, 300):
        assert weighted_knn(train, tl, test, vl, ks=[k], num_classes=6)[k] == sweep[k]


# ----------------------------------------------------------------------------- ties
@pytest.mark.parametrize("backend", ["faiss", "torch"])
@pytest.mark.parametrize("train_chunk", [1, 2, 100])
def test_equal_similarities_prefer_lower_train_index(backend, train_chunk):
    e1, e2 = [1, 0, 0], [0, 1, 0]
    train = np.array([e2, e1, e1, e1, e2, e1], np.float32)  # exact ties at sim 1 for 1, 2, 3, 5
    test = np.array([e1, e2], np.float32)
    sims, idx = cosine_topk(train, test, 3, backend=backend, train_chunk=train_chunk, test_chunk=1)
    assert idx.tolist() == [[1, 2, 3], [0, 4, 1]]
    assert sims[0].tolist() == [1.0, 1.0, 1.0]


def test_backends_agree_on_data_full_of_exact_ties():
    # 0/1 train vectors and one-hot queries: every similarity is a single normalised
    # coordinate, exact whatever the BLAS blocking, and there are ties everywhere, also
    # across the k-th place (faiss alone picks arbitrarily there; the faiss backend
    # re-resolves those rows). Reference: a stable sort of the full similarity matrix.
    rng = np.random.default_rng(3)
    train = rng.integers(0, 2, (700, 6)).astype(np.float32)
    train[train.sum(1) == 0, 0] = 1
    test = np.repeat(np.eye(6, dtype=np.float32), 3, axis=0)
    trn = torch.nn.functional.normalize(torch.from_numpy(train), dim=1)
    ref = (torch.from_numpy(test) @ trn.t()).argsort(dim=1, descending=True, stable=True)[:, :30]
    for backend in ("faiss", "torch"):
        for chunk in (64, 1000):
            _, idx = cosine_topk(train, test, 30, backend=backend, train_chunk=chunk, test_chunk=5)
            assert torch.equal(idx, ref), (backend, chunk)


def test_equal_class_scores_prefer_lower_class_index():
    e1 = [1, 0]
    train = np.array([e1, e1], np.float32)
    labels = np.array([3, 1])  # two identical neighbours of different classes: equal scores
    test = np.array([e1, e1], np.float32)
    r = weighted_knn(train, labels, test, np.array([1, 3]), ks=[2], num_classes=6)
    assert r[2]["top1"] == 50.0  # class 1 is ranked first, class 3 second
    assert r[2]["top5"] == 100.0


def test_classes_without_votes_never_count_for_top5():
    # 10 classes, k = 1: only one class is voted for; DINO's sort would put four zero-score
    # classes after it in top-5, in an order torch does not define.
    train = np.eye(4, dtype=np.float32)
    labels = np.array([7, 8, 9, 6])
    test = np.array([[1, 0, 0, 0]], np.float32)
    for target in range(10):
        r = weighted_knn(train, labels, test, np.array([target]), ks=[1], num_classes=10)
        assert r[1]["top5"] == (100.0 if target == 7 else 0.0)


# ----------------------------------------------------------------------------- sizes
@pytest.mark.parametrize("n_test", [1, 7, 99, 101])
def test_any_number_of_test_images_matches_brute_force(n_test):
    rng = np.random.default_rng(n_test)
    train = rng.standard_normal((500, 16)).astype(np.float32)
    test = rng.standard_normal((n_test, 16)).astype(np.float32)
    tl, vl = rng.integers(0, 7, 500), rng.integers(0, 7, n_test)
    got = weighted_knn(train, tl, test, vl, ks=[10], num_classes=7, test_chunk=32, train_chunk=128)[10]
    trn = torch.nn.functional.normalize(torch.from_numpy(train), dim=1)
    tst = torch.nn.functional.normalize(torch.from_numpy(test), dim=1)
    d, i = (tst @ trn.t()).topk(10)
    scores = torch.zeros(n_test, 7).scatter_add_(1, torch.from_numpy(tl)[i], (d / 0.07).exp())
    assert got["top1"] == (scores.argmax(1) == torch.from_numpy(vl)).sum().item() * 100.0 / n_test


def test_k_larger_than_train_set_uses_every_image():
    rng = np.random.default_rng(1)
    train, test = rng.standard_normal((12, 4)).astype(np.float32), rng.standard_normal((5, 4)).astype(np.float32)
    tl, vl = rng.integers(0, 3, 12), rng.integers(0, 3, 5)
    r = weighted_knn(train, tl, test, vl, ks=[10, 20, 200], num_classes=3)
    assert r[20]["k_used"] == r[200]["k_used"] == 12 and r[20]["top1"] == r[200]["top1"]


def test_train_set_is_read_in_bounded_chunks():
    rng = np.random.default_rng(2)
    data = rng.standard_normal((1000, 8)).astype(np.float32)
    asked = []

    def rows(a, b):
        asked.append(b - a)
        return torch.from_numpy(data[a:b])

    test = rng.standard_normal((30, 8)).astype(np.float32)
    sims, idx = cosine_topk(Rows(None, n=1000, fn=rows), test, 20, backend="torch", train_chunk=128)
    assert max(asked) <= 128 and sum(asked) == 1000  # each train row read once
    full_s, full_i = cosine_topk(data, test, 20, backend="torch", train_chunk=10_000)
    assert torch.equal(idx, full_i)


# ----------------------------------------------------------------------------- protocol
@pytest.fixture
def folder(tmp_path, monkeypatch):
    monkeypatch.setenv("SSL_BENCH_HOME", str(tmp_path / "home"))
    return make_image_folder(tmp_path / "data")


def test_protocol_runs_and_reports_one_result_per_k(folder):
    model = ModelHandle.random_init("vit_cpu_tiny", seed=0)
    proto = KNNProtocol.from_preset("synth", {"dataset": "imagefolder", "resize": 32, "crop": 32,
                                              "ks": [1, 5, 20], "feature": "cls+avgpool", "progress": False})
    results = proto.run(model, folder)
    assert [r.variant for r in results] == [{"k": k, "feature": "cls+avgpool"} for k in (1, 5, 20)]
    for r in results:
        assert set(r.metrics) == {"top1"}  # 3 classes: no top-5
        assert 0.0 <= r.metrics["top1"] <= 100.0
        assert r.params["feature_dim"] == 2 * model.backbone.embed_dim
        assert r.split == "val" and r.dataset == "imagefolder"
    assert results[2].params["k_used"] == 18  # 3 classes x 6 train images
    for r in results:  # per-image hits that give back the number (the bootstrap's statistics)
        stats = read_per_image(r.per_image)
        assert stats.metrics == ["top1"] and stats.images == r.params["n_val"]
        assert stats.metric_of_weights(np.ones((1, stats.images)), "top1")[0] == r.metrics["top1"]
    # second run reads the feature cache and gives the same numbers
    again = proto.run(model, folder)
    assert [r.metrics for r in again] == [r.metrics for r in results]
    assert again[0].params["features_from_cache"]


def test_val_class_missing_from_train_is_an_error(folder):
    from harness.errors import DataError

    (folder / "val" / "zz_new").mkdir()
    Image.new("RGB", (32, 32)).save(folder / "val" / "zz_new" / "x.png")
    proto = KNNProtocol.from_preset("synth", {"dataset": "imagefolder", "progress": False})
    with pytest.raises(DataError, match="zz_new"):
        proto.run(ModelHandle.random_init("vit_cpu_tiny"), folder)


def test_fingerprints():
    dino = KNNProtocol.from_preset("dino", {"dataset": "imagenet"})
    assert KNNProtocol.from_preset("synth", {"dataset": "imagenet"}).fingerprint() != dino.fingerprint()
    for change in ({"feature": "avgpool"}, {"temperature": 0.1}, {"n_last_blocks": 2}, {"crop": 192}):
        assert KNNProtocol.from_preset("dino", {"dataset": "imagenet", **change}).fingerprint() != dino.fingerprint()
    for same in ({"backend": "torch"}, {"ks": [20]}, {"batch_size": 8}, {"test_chunk": 7}):
        assert KNNProtocol.from_preset("dino", {"dataset": "imagenet", **same}).fingerprint() == dino.fingerprint()
