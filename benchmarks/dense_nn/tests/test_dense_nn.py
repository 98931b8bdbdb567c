"""Dense NN protocol: hand-computable cases for each piece, and the protocol end to end
on SynthScenes 'tiny' with a random-init CPU ViT (errors included)."""
from __future__ import annotations

import shutil
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
import torch

import benchmarks.dense_nn.index as dense_nn_index
from benchmarks.dense_nn.protocol import PRESETS, Config, DenseNN, dense_nn_from_features, format_table, summary
from benchmarks.dense_nn.aug import HbirdAugment, torch_nearest_resize
from benchmarks.dense_nn.core import (Bank, CoreSettings, aggregate, build_bank, image_labels,
                                      memory_per_image, predict_image, rarity_select)
from benchmarks.dense_nn.index import BankIndex, IndexSpec
from benchmarks.dense_nn.metric import ConfusionMatrix, compute_miou
from harness.per_image import read_per_image
from benchmarks.dense_nn.subsets import (check_nested, generate_subsets, list_sha256, parse_fraction,
                                         plan_subsets)
from harness.errors import ConfigError, DataError

# ============================================================================ patch labels
MASK = np.array([
    [0, 0, 1, 1],
    [0, 1, 1, 2],
    [255, 255, 2, 255],
    [255, 255, 3, 3],
], dtype=np.uint8)  # 2x2 patches of 2x2 pixels


def settings(**kw) -> CoreSettings:
    base = dict(num_classes=4, ignore_index=255, patch_size=2, k=1)
    base.update(kw)
    return CoreSettings(**base)


def test_majority_vote_patch_labels():
    lab = image_labels(MASK, (2, 2), settings(label_mode="majority", bank_ignore="drop"))
    # patch (0,0): 0,0,0,1 -> 0; (0,1): 1,1,1,2 -> 1; (1,0): all ignore -> dropped;
    # (1,1): 2,255,3,3 -> 3 (ignore pixel excluded, 2 votes for 3)
    assert lab.hard.tolist() == [0, 1, -1, 3]
    assert lab.nonempty.tolist() == [True, True, False, True]


def test_majority_vote_tie_goes_to_smallest_class():
    mask = np.array([[2, 1], [1, 2]], dtype=np.uint8)
    assert image_labels(mask, (1, 1), settings(label_mode="majority")).hard.tolist() == [1]


def dense(lab, c):
    out = np.zeros((len(lab.cls), c), np.float32)
    for r in range(len(lab.cls)):
        for cl, f in zip(lab.cls[r], lab.frac[r]):
            if f > 0:
                out[r, cl] = f
    return out


def test_soft_histograms_drop_zero_extra():
    s = settings(label_mode="soft", bank_ignore="drop")
    d = dense(image_labels(MASK, (2, 2), s), 4)
    np.testing.assert_allclose(d[0], [0.75, 0.25, 0, 0])
    np.testing.assert_allclose(d[1], [0, 0.75, 0.25, 0])
    np.testing.assert_allclose(d[2], [0, 0, 0, 0])  # dropped
    np.testing.assert_allclose(d[3], [0, 0, 1 / 3, 2 / 3], rtol=1e-6)
    # open-hummingbird-eval VOC: 255 counted as background (class 0), over all 4 pixels
    z = dense(image_labels(MASK, (2, 2), settings(label_mode="soft", bank_ignore="zero")), 4)
    np.testing.assert_allclose(z[2], [1, 0, 0, 0])
    np.testing.assert_allclose(z[3], [0.25, 0, 0.25, 0.5])
    # ADE20K: the ignored "other" is an extra class 4
    e = dense(image_labels(MASK, (2, 2), settings(label_mode="soft", bank_ignore="extra_class")), 5)
    np.testing.assert_allclose(e[2], [0, 0, 0, 0, 1])
    np.testing.assert_allclose(e[3], [0, 0, 0.25, 0.5, 0.25])


def test_mask_label_beyond_class_count_is_a_data_error():
    bad = MASK.copy()
    bad[0, 0] = 7
    with pytest.raises(DataError, match="outside the 4 classes"):
        image_labels(bad, (2, 2), settings(), where="training image 'x'")


# ============================================================================ aggregation
def tiny_bank(labels_hard=None, soft=None, vectors=None, num_pred=3):
    vectors = np.asarray(vectors, np.float32)
    index = BankIndex(vectors.shape[1], IndexSpec())
    index.add(vectors / np.linalg.norm(vectors, axis=1, keepdims=True))
    bank = Bank(index=index, num_pred=num_pred)
    if labels_hard is not None:
        bank.hard = np.asarray(labels_hard)
    else:
        bank.cls, bank.frac = soft
    return bank


def test_softmax_aggregation_matches_hand_formula():
    # unit bank vectors at angles 0, 60 and 90 degrees; the query at 0 degrees
    vecs = [[1, 0], [0.5, np.sqrt(3) / 2], [0, 1]]
    cls = np.array([[0, 1], [1, -1], [2, -1]], np.int16)
    frac = np.array([[0.5, 0.5], [1, 0], [1, 0]], np.float32)
    bank = tiny_bank(soft=(cls, frac), vectors=vecs)
    s = settings(num_classes=3, k=3, vote_mode="softmax", temperature=0.5)
    got = aggregate(bank, np.array([[2.0, 0.0]], np.float32), s).numpy()[0]
    w = np.exp(np.array([1.0, 0.5, 0.0]) / 0.5)
    w /= w.sum()
    expect = w[0] * np.array([0.5, 0.5, 0]) + w[1] * np.array([0, 1, 0]) + w[2] * np.array([0, 0, 1])
    np.testing.assert_allclose(got, expect, rtol=1e-5)


def test_majority_vote_among_neighbours_ties_to_smallest():
    vecs = [[1, 0], [0.9, 0.1], [0.8, 0.2], [0.7, 0.3], [-1, 0]]
    bank = tiny_bank(labels_hard=[2, 1, 2, 1, 0], vectors=vecs)
    s = settings(num_classes=3, k=4, vote_mode="majority", patch_size=1)
    scores = aggregate(bank, np.array([[1.0, 0.0]], np.float32), s)
    assert scores.numpy().tolist() == [[0, 2, 2]]
    assert predict_image(scores, (1, 1), (1, 1), s).tolist() == [[1]]  # tie 1 vs 2 -> 1


def test_nearest_upsampling_puts_patch_label_on_all_its_pixels():
    s = settings(num_classes=3, patch_size=2, upsample="nearest")
    scores = torch.tensor([[1.0, 0, 0], [0, 0, 1.0]])
    assert predict_image(scores, (1, 2), (2, 4), s).tolist() == [[0, 0, 2, 2], [0, 0, 2, 2]]


# ============================================================================ memory cap
def test_rarity_select_keeps_rare_class_patches():
    # 4 patches: classes {0}, {0}, {0, 1}, {} ; freq(0)=3, freq(1)=1 -> scores 3, 3, 4, 1e6
    pres = np.array([[1, 0], [1, 0], [1, 1], [0, 0]], bool)
    rand = torch.tensor([0.9, 0.5, 0.1])  # -> 2.7, 1.5, 0.4, 1e6
    assert rarity_select(pres, 2, rand).tolist() == [2, 1]
    assert memory_per_image(1000, 8, 2) == 62 and memory_per_image(5, 8) == 1


def test_memory_cap_bank_size():
    rng = np.random.default_rng(0)
    feats = [rng.standard_normal((4, 8)).astype(np.float32) for _ in range(3)]
    labels = [image_labels(MASK, (2, 2), settings(label_mode="soft", bank_ignore="drop")) for _ in range(3)]
    bank = build_bank(lambda i: feats[i], labels, settings(label_mode="soft", k=1), n_keep=2)
    assert len(bank) == 6
    full = build_bank(lambda i: feats[i], labels, settings(label_mode="soft", k=1))
    assert len(full) == 9  # the all-ignore patch of each image is dropped


# ============================================================================ metric
def test_confusion_miou_with_ignore_and_absent_classes():
    cm = ConfusionMatrix(4, ignore_index=255)
    gt = np.array([0, 0, 1, 1, 255, 255])
    pred = np.array([0, 1, 1, 1, 3, 0])
    cm.update(gt, pred)
    assert cm.matrix.tolist() == [[1, 1, 0, 0], [0, 2, 0, 0], [0, 0, 0, 0], [0, 0, 0, 0]]
    plain = compute_miou(cm.matrix)  # class 0: 1/2, class 1: 2/3; 2 and 3 absent -> left out
    assert plain.miou == pytest.approx((1 / 2 + 2 / 3) / 2)
    assert plain.n_classes_averaged == 2
    assert plain.pixel_accuracy == pytest.approx(3 / 4)
    hb = compute_miou(cm.matrix, count_absent_classes=True)
    assert hb.miou == pytest.approx((1 / 2 + 2 / 3) / 4)


def test_predicted_but_absent_class_counts_as_zero():
    conf = np.array([[2, 0, 1], [0, 1, 0], [0, 0, 0]])  # class 2 predicted once, never in gt
    assert compute_miou(conf).miou == pytest.approx((2 / 3 + 1 + 0) / 3)


def test_hungarian_flag_rematches_permuted_predictions():
    conf = np.array([[0, 5, 0], [0, 0, 3], [4, 0, 0]])  # a perfect but permuted prediction
    assert compute_miou(conf).miou == 0.0
    r = compute_miou(conf, hungarian=True)
    assert r.miou == pytest.approx(1.0)
    assert r.mapping.tolist() == [2, 0, 1]


def test_count_ignored_class_adds_a_zero_term_for_the_extra_class():
    conf = np.array([[3, 0, 1], [0, 2, 0]])  # 2 classes + the extra "other" prediction column
    plain = compute_miou(conf)
    assert plain.miou == pytest.approx((3 / 4 + 1) / 2)
    quirk = compute_miou(conf, count_ignored_class=True)
    assert quirk.miou == pytest.approx((3 / 4 + 1) / 3)


# ============================================================================ subsets
def test_generated_subsets_nested_disjoint_deterministic():
    train = [f"t{i:04d}" for i in range(1000)]
    val = [f"v{i:03d}" for i in range(50)]
    plan = plan_subsets(train, val, ["1/1", "1/8", "1/64", "1/128"], [42, 400], dataset="voc")
    assert [(s.label, s.seed) for s in plan][:4] == [("1/1", 42), ("1/8", 42), ("1/64", 42), ("1/128", 42)]
    sizes = {(s.label, s.seed): len(s.stems) for s in plan}
    assert sizes[("1/8", 400)] == 125 and sizes[("1/64", 42)] == 15 and sizes[("1/128", 42)] == 7
    assert check_nested(plan) == []
    for s in plan:
        assert not set(s.stems) & set(val)
    again = plan_subsets(list(reversed(train)), val, ["1/8"], [42], dataset="voc")
    assert again[0].stems == generate_subsets(train, [8], 42)[8]
    assert set(plan[1].stems) != set(plan[5].stems)  # seeds differ
    assert list_sha256(["b", "a"]) == list_sha256(["a", "b"])


def test_published_lists_are_read_and_checked(tmp_path):
    train = [f"img{i:03d}" for i in range(256)]
    d = tmp_path / "file_sets" / "voc"
    order = np.random.default_rng(0).permutation(train)
    for div, n in ((8, 32), (64, 4), (128, 2)):
        (d / f"1_div_{div}").mkdir(parents=True)
        (d / f"1_div_{div}" / f"trainaug_{div}_42.txt").write_text("\n".join(order[:n]) + "\n")
    plan = plan_subsets(train, ["v"], ["1/8", "1/64", "1/128"], [42], dataset="voc",
                        subset_dir=tmp_path / "file_sets")
    assert [len(s.stems) for s in plan] == [32, 4, 2]
    assert plan[0].source.endswith("trainaug_8_42.txt")
    with pytest.raises(DataError, match="no subset list for fraction 1/8 and seed 400"):
        plan_subsets(train, ["v"], ["1/8"], [400], dataset="voc", subset_dir=tmp_path / "file_sets")
    (d / "1_div_8" / "trainaug_8_42.txt").write_text("img000\nnot_an_image\n")
    with pytest.raises(DataError, match="not_an_image"):
        plan_subsets(train, ["v"], ["1/8"], [42], dataset="voc", subset_dir=tmp_path / "file_sets")


def test_train_val_overlap_and_bad_fraction():
    with pytest.raises(DataError, match="both the training and the validation"):
        plan_subsets(["a", "b"], ["b"], ["1/1"], [42], dataset="voc")
    with pytest.raises(ConfigError):
        parse_fraction("2/8")
    assert parse_fraction("1/64") == Fraction(1, 64)


# ============================================================================ arrays in, metrics out
def test_perfect_features_give_perfect_miou():
    rng = np.random.default_rng(3)
    c, g, p = 5, 4, 4

    def image():
        coarse = rng.integers(0, c, (g, g))
        mask = np.repeat(np.repeat(coarse, p, 0), p, 1).astype(np.uint8)
        feats = np.eye(c, dtype=np.float32)[coarse] + 0.01 * rng.standard_normal((g, g, c)).astype(np.float32)
        return feats, mask

    train = [image() for _ in range(6)]
    val = [image() for _ in range(3)]
    for preset, upsample, expect in (("cribo", "nearest", 100), ("hbird", "nearest", 100), ("hbird", "bilinear", 90)):
        cfg = dict(PRESETS[preset], k=3, bank_augment="none", resize="square", upsample=upsample)
        out = dense_nn_from_features([t[0] for t in train], [t[1] for t in train],
                                     [v[0] for v in val], [v[1] for v in val], cfg, num_classes=c)
        # bilinear upsampling of patch scores blurs class borders that fall on patch borders
        assert out["mIoU"] >= expect - 1e-6, (preset, upsample)


def test_float16_bank_and_ivfpq_agree_with_exact_on_separated_data():
    rng = np.random.default_rng(5)
    centres = rng.standard_normal((4, 16)).astype(np.float32) * 5
    x = (centres[rng.integers(0, 4, 4000)] + rng.standard_normal((4000, 16))).astype(np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    q = x[:50] + 0.01
    exact = BankIndex(16, IndexSpec(), threads=1)
    exact.add(x)
    half = BankIndex(16, IndexSpec(dtype="float16"), threads=1)
    half.add(x)
    _, i32 = exact.search(q, 1)
    _, i16 = half.search(q, 1)
    assert (i32 == i16).mean() > 0.95
    ivf = BankIndex(16, IndexSpec(kind="ivfpq", nlist=16, pq_m=4, pq_nbits=4, nprobe=4), threads=1)
    ivf.train(x)
    ivf.add(x)
    _, ii = ivf.search(q, 5)
    assert ii.shape == (50, 5)


# ============================================================================ augmentation
def test_hbird_augmentation_is_deterministic_per_seed_epoch_image():
    aug = HbirdAugment(input_size=32)
    a = aug.params(42, 0, "img1", 64, 48)
    assert a == aug.params(42, 0, "img1", 64, 48)
    assert a != aug.params(42, 1, "img1", 64, 48)
    _, (i, j, h, w) = a
    assert 0 <= i and 0 <= j and i + h <= 64 and j + w <= 48
    mask = np.arange(64 * 48, dtype=np.int64).reshape(64, 48) % 7
    out = aug.mask(mask.astype(np.uint8), 42, 0, "img1")
    assert out.shape == (32, 32) and set(np.unique(out)) <= set(range(7))


def test_torch_nearest_resize_is_torchvisions_tensor_nearest():
    m = np.arange(30, dtype=np.uint8).reshape(5, 6)
    from torchvision.transforms import InterpolationMode
    from torchvision.transforms import functional as TF

    ref = TF.resize(torch.from_numpy(m)[None], [4, 4], interpolation=InterpolationMode.NEAREST)[0].numpy()
    assert (torch_nearest_resize(m, (4, 4)) == ref).all()


# ============================================================================ config / presets
def test_presets_and_fingerprint():
    cribo = DenseNN.from_preset("cribo", {"dataset": "voc"})
    assert cribo.cfg.k == 50 and cribo.cfg.label_mode == "majority" and cribo.cfg.resize == "patch_multiple"
    hb = DenseNN.from_preset("hbird", {"dataset": "ade20k"})
    assert hb.cfg.k == 30 and hb.cfg.vote_mode == "softmax" and hb.cfg.temperature == 0.02
    assert cribo.fingerprint() != hb.fingerprint()
    fp = cribo.fingerprint()
    assert DenseNN.from_preset("cribo", {"dataset": "voc", "batch_size": 3, "num_workers": 2}).fingerprint() == fp
    for key, value in (("k", 20), ("seeds", [1]), ("fractions", ["1/8"]), ("max_side", 448), ("memory_size", 10),
                       ("temperature", 0.1), ("n_last_blocks", 2), ("label_mode", "soft"),
                       ("bank_dtype", "float32"), ("hungarian", True)):
        assert DenseNN.from_preset("cribo", {"dataset": "voc", key: value}).fingerprint() != fp, key


def test_config_errors():
    with pytest.raises(ConfigError, match="unknown key"):
        DenseNN.from_preset("cribo", {"dataset": "voc", "kk": 3})
    with pytest.raises(ConfigError, match="square"):
        DenseNN.from_preset("hbird", {"dataset": "voc", "resize": "patch_multiple"})
    with pytest.raises(ConfigError, match="label_mode"):
        DenseNN.from_preset("cribo", {"dataset": "voc", "label_mode": "fuzzy"})
    with pytest.raises(ConfigError, match="unknown preset"):
        DenseNN.from_preset("nope")
    assert Config().k == 50


# ============================================================================ the protocol on SynthScenes
@pytest.fixture(scope="module")
def synth_root(synth_tiny):
    return synth_tiny  # the session's SynthScenes tiny (read only here: copies are made to break it)


@pytest.fixture
def tiny_model():
    from harness.models.handle import ModelHandle

    return ModelHandle.random_init("vit_cpu_tiny", seed=0)


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    # tiny workloads: thread pools only add synchronisation (and spin on a busy machine)
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(autouse=True)
def _isolated_home(tmp_path, monkeypatch):
    monkeypatch.setenv("SSL_BENCH_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("SSL_BENCH_RESULTS", str(tmp_path / "results"))


FAST = {"fractions": ["1/8", "1/1"], "seeds": [42, 400], "progress": False, "threads": 1}


def test_protocol_cribo_on_synthscenes(synth_root, tiny_model, tmp_path, capsys):
    proto = DenseNN.from_preset("cribo", {"dataset": "voc", "k": 5, "artifacts_dir": str(tmp_path / "art"), **FAST})
    results = proto.run(tiny_model, synth_root)
    assert [(r.variant["fraction"], r.seed) for r in results] == [("1/1", 42), ("1/8", 42), ("1/8", 400)]
    for r in results:
        assert 0 <= r.metrics["mIoU"] <= 100 and r.split == "val" and r.dataset == "voc"
        assert r.params["metric"]["name"] == "plain mIoU (mmseg)"
        assert len(r.params["subset_sha256"]) == 64
    assert results[0].params["n_train_images"] == 24 and results[1].params["n_train_images"] == 3
    listed = Path(results[1].artifacts["subset_list"]).read_text().split()
    assert list_sha256(listed) == results[1].params["subset_sha256"]
    assert results[1].params["run_fingerprint"] != results[2].params["run_fingerprint"]
    assert capsys.readouterr().out == ""  # whoever prints formats the results
    table = format_table(results)
    assert "mean +- std" in table and "1/8" in table
    df = summary(results)
    assert df.loc[df.fraction == "1/8", "n_seeds"].item() == 2


def test_each_record_carries_the_stage_seconds_in_its_cost(synth_root, tiny_model):
    """The run's seconds by stage are in every record's cost block, beside the harness's wall
    time; they key nothing (the fingerprint and the record id are the settings' and variant's)."""
    from harness.running.evaluate import evaluate

    proto = DenseNN.from_preset("cribo", {"dataset": "voc", "k": 5, **FAST, "seeds": [42]})
    records, skipped = evaluate(tiny_model, proto, synth_root)
    stages = ("extract_s", "labels_s", "bank_s", "search_s")
    assert not skipped and len(records) == 2
    for rec in records:
        assert {*stages, "wall_s", "peak_rss_mb", "device_type"} <= set(rec["cost"])
        assert all(rec["cost"][k] >= 0 for k in stages)
        assert sum(rec["cost"][k] for k in stages) <= rec["cost"]["wall_s"] + 0.01  # each rounded to ms
        assert rec["protocol"]["fingerprint"] == proto.fingerprint()
        # per-image areas that give back the record's numbers (the bootstrap's statistics)
        stats = read_per_image(rec["per_image"])
        ones = np.ones((1, stats.images))
        for metric in ("mIoU", "pixel_accuracy"):
            assert stats.metric_of_weights(ones, metric)[0] == rec["metrics"][metric]
    assert records[0]["cost"] == records[1]["cost"]  # one run's split, copied into each record


def test_hungarian_matching_keeps_each_images_confusion_matrix(synth_root, tiny_model):
    """Hungarian matching maps classes from the whole set's confusion matrix: a sum of per-image
    class areas cannot recompute it, so its records keep each image's matrix, which gives back
    the record's number (harness.per_image, kind confusion)."""
    from harness.per_image import read_per_image

    # hbird_synth: the hbird preset at SynthScenes' 64 px (its 224 px input costs the tiny ViT 12x the tokens)
    proto = DenseNN.from_preset("hbird_synth", {"dataset": "voc", "k": 5, **FAST, "fractions": ["1/1"], "seeds": [42]})
    assert proto.cfg.hungarian
    for r in proto.run(tiny_model, synth_root):
        stats = read_per_image(r.per_image)
        assert stats.kind == "confusion" and stats.hungarian
        assert stats.metric_of_weights(np.ones((1, stats.images)), "mIoU")[0] == r.metrics["mIoU"]


@pytest.mark.parametrize("artifacts_dir", [None, "art"])
def test_each_record_owns_its_artifacts(synth_root, tmp_path, artifacts_dir):
    """Two models' runs of one protocol request: each record points to its own confusion
    matrix (they used to share one file per protocol fingerprint, the last run's), and each
    file gives back its record's number."""
    from benchmarks.dense_nn.protocol import metrics_from_confusion
    from harness.running.evaluate import evaluate
    from harness.models.handle import ModelHandle

    values = {"dataset": "voc", "k": 5, "fractions": ["1/8", "1/1"], "seeds": [42], "progress": False,
              "threads": 1}
    if artifacts_dir:
        values["artifacts_dir"] = str(tmp_path / artifacts_dir)
    records = []
    for model in (ModelHandle.random_init("vit_cpu_tiny", seed=0, name="a"),
                  ModelHandle.random_init("vit_cpu_tiny", seed=1, name="b")):
        proto = DenseNN.from_preset("cribo", values)
        records += evaluate(model, proto, synth_root)[0]
    paths = [r["artifacts"]["confusion"] for r in records]
    assert len(records) == 4 and len(set(paths)) == 4
    for rec in records:
        conf = np.load(rec["artifacts"]["confusion"])
        m = metrics_from_confusion(conf, DenseNN.from_preset("cribo", values).cfg)
        assert m["mIoU"] == pytest.approx(rec["metrics"]["mIoU"], abs=1e-9)
    assert records[0]["metrics"]["mIoU"] != records[2]["metrics"]["mIoU"]
    lists = {r["artifacts"]["subset_list"] for r in records if "subset_list" in r["artifacts"]}
    assert len(lists) == 2


def test_protocol_hbird_with_augmentation_and_cap(synth_root, tiny_model, tmp_path):
    proto = DenseNN.from_preset("hbird", {"dataset": "ade20k", "k": 5, "input_size": 64, "aug_epochs": 2,
                                          "memory_size": 300, "fractions": ["1/8", "1/1"], "seeds": [42],
                                          "progress": False, "threads": 1, "artifacts_dir": str(tmp_path / "art")})
    results = proto.run(tiny_model, synth_root)
    assert [r.variant["fraction"] for r in results] == ["1/1", "1/8"]
    assert results[0].params["bank_ignore"] == "extra_class"
    assert results[0].params["bank_size"] == memory_per_image(300, 24, 2) * 24 * 2
    assert results[0].split == "validation"


def _copy(root: Path, dst: Path) -> Path:
    shutil.copytree(root, dst)
    return dst


def test_subset_list_naming_a_missing_image_is_a_data_error(synth_root, tiny_model, tmp_path):
    d = tmp_path / "lists" / "voc" / "1_div_8"
    d.mkdir(parents=True)
    (d / "trainaug_8_42.txt").write_text("train_000001\nno_such_image\n")
    proto = DenseNN.from_preset("cribo", {"dataset": "voc", "fractions": ["1/8"], "seeds": [42], "progress": False,
                                          "subset_dir": str(tmp_path / "lists"),
                                          "artifacts_dir": str(tmp_path / "art")})
    with pytest.raises(DataError, match="no_such_image"):
        proto.run(tiny_model, synth_root)
    assert not (tmp_path / "art").exists()


def test_missing_files_are_a_data_error(synth_root, tiny_model, tmp_path):
    root = _copy(synth_root, tmp_path / "broken")
    (root / "VOC2012" / "JPEGImages" / "val_000003.jpg").unlink()
    proto = DenseNN.from_preset("cribo", {"dataset": "voc", "progress": False, **{"fractions": ["1/1"]}})
    with pytest.raises(DataError, match="val_000003"):
        proto.run(tiny_model, root)


def test_mask_with_too_large_label_is_a_data_error(synth_root, tiny_model, tmp_path):
    from PIL import Image

    root = _copy(synth_root, tmp_path / "badmask")
    path = root / "VOC2012" / "SegmentationClassAug" / "train_000002.png"
    m = np.array(Image.open(path))
    m[0, 0] = 200
    Image.fromarray(m).save(path)
    proto = DenseNN.from_preset("cribo", {"dataset": "voc", "fractions": ["1/1"], "seeds": [42], "progress": False,
                                          "artifacts_dir": str(tmp_path / "art")})
    with pytest.raises(DataError, match="200"):
        proto.run(tiny_model, root)
    assert not (tmp_path / "art").exists()  # nothing written: artifacts come after all runs


@pytest.mark.parametrize("queries_per_chunk", [None, 15])  # 15: chunks of 15, 15 and 10 share one buffer
def test_torch_exact_search_blocks_merge_to_the_true_top_k(monkeypatch, queries_per_chunk):
    if queries_per_chunk:
        monkeypatch.setattr(dense_nn_index, "SIM_ELEMS_CPU", 700 * queries_per_chunk)
    rng = np.random.default_rng(9)
    x = rng.standard_normal((3000, 8)).astype(np.float32)
    q = rng.standard_normal((40, 8)).astype(np.float32)
    idx = BankIndex(8, IndexSpec(dtype="float16", device="cpu", block=700))
    idx.add(x[:1000])
    idx.add(x[1000:])
    sims, ids = idx.search(q, 6)
    xh = x.astype(np.float16).astype(np.float32)
    expect = np.argsort(-(q @ xh.T), axis=1, kind="stable")[:, :6]
    assert (ids == expect).mean() > 0.99
    np.testing.assert_allclose(sims, np.take_along_axis(q @ xh.T, ids, 1), rtol=1e-5, atol=1e-5)
    assert idx.reconstruct(ids[:2]).shape == (2, 6, 8)


@pytest.mark.parametrize("draw", ["normal", "ties", "few_values", "float16_grid", "nan_and_inf"])
@pytest.mark.parametrize("n,k", [(20000, 50), (5003, 6), (2000, 1), (300, 50)])
def test_topk_rows_is_torch_topk(draw, n, k):
    # the same values and indices as torch.topk where the shortcut runs (every draw but the last
    # two on the longer rows), where a row's largest values tie (ties: about one row in three,
    # searched again by torch), where thousands of values tie (few_values: no shortcut), with
    # and without a tail of columns past the last full group, and on rows too short for it
    g = torch.Generator().manual_seed(n + k)
    sim = torch.randn(12, n, generator=g)
    if draw in ("ties", "few_values"):
        sim = torch.randint(0, 3000 if draw == "ties" else 30, (12, n), generator=g).float()
    elif draw == "float16_grid":
        sim = sim.half().float()
    elif draw == "nan_and_inf":
        sim[2, 7], sim[3, 11], sim[3, 12] = float("nan"), float("inf"), float("inf")
    want, got = torch.topk(sim, k, dim=1), dense_nn_index.topk_rows(sim, k)
    assert torch.equal(want.indices, got[1])
    assert torch.equal(want.values.nan_to_num(), got[0].nan_to_num())


def test_hbird_is_the_reference_by_default_and_cribo_keeps_plain_miou():
    hb = DenseNN.from_preset("hbird", {"dataset": "voc"}).cfg
    assert (hb.hungarian, hb.count_absent_classes, hb.count_ignored_class) == (True, True, True)
    assert hb.norm_std == [0.229, 0.224, 0.255]
    # CrIBo's text says mIoU (no matching) and its pretraining normalisation is ImageNet's
    cr = DenseNN.from_preset("cribo", {"dataset": "voc"}).cfg
    assert (cr.hungarian, cr.count_absent_classes, cr.count_ignored_class) == (False, False, False)
    assert cr.norm_std == [0.229, 0.224, 0.225]
    # the opt-in departures are settings in the fingerprint
    fp = DenseNN.from_preset("hbird", {"dataset": "voc"}).fingerprint()
    for over in ({"hungarian": False}, {"count_absent_classes": False}, {"norm_std": [0.229, 0.224, 0.225]}):
        assert DenseNN.from_preset("hbird", {"dataset": "voc", **over}).fingerprint() != fp, over


def test_memory_budget_is_checked_before_the_bank_is_built():
    feats = [np.ones((4, 64), np.float32)] * 3
    labels = [image_labels(MASK, (2, 2), settings())] * 3
    with pytest.raises(ConfigError, match="budget"):
        build_bank(lambda i: feats[i], labels, settings(), max_bytes=1000)


def test_search_device_auto_follows_the_model():
    """search_device 'auto' is the model's device type, so a CPU run on a GPU host searches on
    the CPU; an explicit choice wins; without a model it stays 'auto' (CUDA when torch sees one)."""
    from benchmarks.dense_nn.protocol import core_settings
    from harness.config import from_dict

    cfg = from_dict(Config, PRESETS["cribo"])
    assert cfg.search_device == "auto"
    assert core_settings(cfg, 21, 255, 16, "cpu").index.device == "cpu"
    assert core_settings(cfg, 21, 255, 16, "cuda").index.device == "cuda"
    assert core_settings(cfg, 21, 255, 16).index.device == "auto"
    cfg.search_device = "cpu"
    assert core_settings(cfg, 21, 255, 16, "cuda").index.device == "cpu"


def test_a_bank_smaller_than_k_says_what_to_set():
    """A stride-32 model leaves a few patches an image: the refusal names k's bound and the settings."""
    from harness.errors import ConfigError

    index = BankIndex(4, IndexSpec(), threads=1)
    index.add(np.eye(4, dtype=np.float32)[:3])
    with pytest.raises(ConfigError, match=r"dense_nn: the memory bank holds 3 patches .* fewer than k=5 neighbours; "
                                          r"set k to at most 3 \(--set k=N; in a suite --set dense_nn.k=N\)"):
        index.search(np.ones((1, 4), dtype=np.float32), 5)
