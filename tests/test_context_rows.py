"""Context rows (harness.context): chance, the raw-pixel baseline, random init and the
supervised reference as models of a suite."""
import dataclasses
from pathlib import Path

import numpy as np
import pytest
import torch

from harness.context import context_kind
from harness.context.chance import ChanceModel, uniform_segmentation, uniform_topk
from harness.context.pixels import PixelBackbone, pixel_model
from harness.context.supervised import SupervisedSpec, checkpoint_dir, train_supervised
from harness.errors import ConfigError, NotApplicable
from harness.protocol_info import build_protocol
from harness.running.evaluate import evaluate
from harness.models.handle import ModelHandle
from harness.running.suite import (ModelEntry, ProtocolEntry, SuiteConfig, SuiteData, SynthSpec, evaluate_entry,
                                   execute_suite, prepare_model, run_suite)

TINY_KNN = {"dataset": "imagefolder", "ks": [3], "feature": "cls", "progress": False}


def test_pixel_features_are_the_patches_and_a_thumbnail():
    x = torch.randn(2, 3, 16, 24)
    f = PixelBackbone(8).get_features(x)
    assert f.patches.shape == (2, 1, 2, 3, 192) and f.cls.shape == (2, 1, 192)
    # patch (1, 2) holds the pixels of rows 8:16, columns 16:24, channel-last
    assert torch.equal(f.patches[0, 0, 1, 2], x[0, :, 8:16, 16:24].permute(1, 2, 0).reshape(-1))
    thumb = torch.nn.functional.avg_pool2d(x, (2, 3))  # 16 x 24 area-averaged to 8 x 8
    assert torch.allclose(f.cls[:, 0], thumb.permute(0, 2, 3, 1).reshape(2, -1), atol=1e-6)
    with pytest.raises(ConfigError):
        PixelBackbone(8).get_features(x, n_last_blocks=2)


def test_context_models_identify_themselves():
    pixels, chance = pixel_model(8), ChanceModel()
    assert pixels.record_info()["context"] == "pixels" and pixels.cache_key == pixel_model(8).cache_key
    assert pixel_model(16).cache_key != pixels.cache_key  # another patch size is another model
    assert chance.record_info()["context"] == "chance" and chance.record_info()["weights_key"].startswith("chance")
    assert set(chance.record_info()) == set(pixels.record_info())  # the same model block, field for field
    assert context_kind({"method": "random_init"}) == "random_init"  # records written before the field
    assert context_kind({"method": "dino", "context": None}) is None


def test_chance_definitions():
    assert uniform_topk(12) == {"top1": 100 / 12, "top5": 500 / 12}
    assert uniform_topk(4) == {"top1": 25.0}  # top-5 only with >= 5 classes, as the protocols
    m = uniform_segmentation(np.array([100, 100, 0, 0]), 4)
    # IoU_c = (100/4) / (100 + 200/4 - 100/4) = 0.2 for both present classes
    assert m["mIoU"] == pytest.approx(20.0) and m["pixel_accuracy"] == 25.0


def test_chance_records_follow_the_protocols(synth_tiny, isolated_home):
    knn = build_protocol("knn", None, {**TINY_KNN, "ks": [3, 5]})
    recs, _ = evaluate(ChanceModel(), knn, synth_tiny / "imagenet")
    assert [r["variant"] for r in recs] == [{"k": 3, "feature": "cls"}, {"k": 5, "feature": "cls"}]
    assert all(r["metrics"]["top1"] == pytest.approx(100 / 12) and r["model"]["context"] == "chance"
               for r in recs)
    dense = build_protocol("dense_nn", "cribo", {"dataset": "voc", "fractions": ["1/1", "1/2"], "seeds": [1, 2],
                                                 "progress": False})
    recs, _ = evaluate(ChanceModel(), dense, synth_tiny)
    assert sorted((r["variant"]["fraction"], r["seed"]) for r in recs) == [("1/1", 1), ("1/2", 1), ("1/2", 2)]
    assert 0 < recs[0]["metrics"]["mIoU"] < 100 / 3


def test_pixels_run_through_the_feature_protocols(synth_tiny, isolated_home):
    knn = build_protocol("knn", None, TINY_KNN)
    recs, _ = evaluate(pixel_model(8), knn, synth_tiny / "imagenet")
    assert recs[0]["model"]["context"] == "pixels" and recs[0]["protocol"]["params"]["feature_dim"] == 192
    dense = build_protocol("dense_nn", "cribo", {"dataset": "voc", "fractions": ["1/1"], "seeds": [1],
                                                 "progress": False})
    recs, _ = evaluate(pixel_model(8), dense, synth_tiny)
    assert 0 < recs[0]["metrics"]["mIoU"] <= 100


def test_supervised_reference_is_deterministic_and_keyed(synth_tiny):
    spec = SupervisedSpec(steps=3, batch_size=8, seed=1)
    a = train_supervised(spec, synth_tiny / "imagenet", progress=False).state_dict()
    b = train_supervised(spec, synth_tiny / "imagenet", progress=False).state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)
    c = train_supervised(SupervisedSpec(steps=3, batch_size=8, seed=2), synth_tiny / "imagenet",
                         progress=False).state_dict()
    assert not all(torch.equal(a[k], c[k]) for k in a)
    root = synth_tiny / "imagenet"
    assert checkpoint_dir(spec, root) == checkpoint_dir(SupervisedSpec(steps=3, batch_size=8, seed=1), root)
    for other in (SupervisedSpec(steps=4, batch_size=8, seed=1), SupervisedSpec(steps=3, batch_size=8, seed=2),
                  SupervisedSpec(steps=3, batch_size=8, seed=1, lr=1e-4)):
        assert checkpoint_dir(other, root) != checkpoint_dir(spec, root)


def test_suite_entries_check_their_settings(synth_tiny):
    data = SuiteData(synth_tiny, synth_tiny, "synthscenes-tiny")
    with pytest.raises(ConfigError, match="exactly one"):
        prepare_model(ModelEntry(name="x", pixels={}, chance={}), data)
    with pytest.raises(ConfigError, match="stepz"):
        prepare_model(ModelEntry(name="x", supervised={"stepz": 3}), data)
    with pytest.raises(ConfigError, match="patch_size"):
        prepare_model(ModelEntry(name="x", pixels={"patch": 8}), data)


def test_mmseg_protocols_refuse_the_pixel_baseline(tmp_path, isolated_home):
    seg = build_protocol("seg_linear", "synth", {"dataset": "synth_ade"})
    with pytest.raises(NotApplicable, match="raw-pixel"):
        seg.run(pixel_model(8), tmp_path)
    # in a suite: a skip with its reason, no failure, no record
    entry = ProtocolEntry(name="seg_linear", preset="synth", dataset="synth_ade", data_root=str(tmp_path))
    data = SuiteData(tmp_path, tmp_path, "x")
    for model in (pixel_model(8), ChanceModel()):
        outcome = evaluate_entry(model, entry, data, "<test>")
        assert outcome.records == [] and outcome.not_applicable and "skipped" in outcome.summary()


def test_a_suite_with_every_context_row(synth_tiny, isolated_home):
    suite = SuiteConfig(
        synth=SynthSpec(preset="tiny", root=str(synth_tiny)),
        models=[ModelEntry(name="chance", chance={}), ModelEntry(name="pixels", pixels={"patch_size": 8}),
                ModelEntry(name="random_init", random_init={"arch": "vit_cpu_tiny", "seed": 0}),
                ModelEntry(name="supervised", supervised={"steps": 2, "batch_size": 8})],
        protocols=[ProtocolEntry(name="knn", dataset="imagefolder", data_root="{synth}/imagenet",
                                 set={"ks": [3], "progress": False})])
    lines = []
    out = run_suite(suite, "<test>", progress=False, log=lines.append)
    assert not out["failures"], out["failures"]
    kinds = {r["model"]["name"]: r["model"]["context"] for r in out["records"] if r["protocol"]["name"] == "knn"}
    assert kinds == {"chance": "chance", "pixels": "pixels", "random_init": "random_init",
                     "supervised": "supervised"}
    sup = next(r for r in out["records"] if r["model"]["name"] == "supervised")
    assert sup["model"]["method"] == "supervised" and sup["model"]["steps"] == 2 and sup["model"]["checkpoint_sha256"]
    again = []
    # the supervised row alone: the only one with a checkpoint to cache; its evaluations are what
    # reads the cache (the leaderboard and report written after them were the first run's to check)
    execute_suite(dataclasses.replace(suite, models=suite.models[-1:]), "<test>", progress=False, log=again.append)
    assert any("using cached checkpoint" in line for line in again)


@pytest.fixture(scope="module")
def texture_split(tmp_path_factory) -> Path:
    """A small ImageFolder whose 4 classes are textures (horizontal / vertical stripes,
    checks, diagonal stripes) of random dark-on-light colours, periods and phases: learnable in a few dozen
    steps, 16 training and 8 validation images per class."""
    from PIL import Image

    root = tmp_path_factory.mktemp("textures")
    rng = np.random.default_rng(0)
    yy, xx = np.mgrid[0:64, 0:64]
    patterns = {"h": lambda p, f: (yy + f) // p % 2, "v": lambda p, f: (xx + f) // p % 2,
                "check": lambda p, f: ((yy + f) // p + (xx + f) // p) % 2, "diag": lambda p, f: (xx + yy + f) // p % 2}
    for split, n in (("train", 16), ("val", 8)):
        for name, pattern in patterns.items():
            (root / split / name).mkdir(parents=True)
            for i in range(n):
                on = pattern(int(rng.integers(4, 9)), int(rng.integers(0, 8))).astype(bool)
                img = np.where(on[..., None], rng.integers(0, 80, 3), rng.integers(176, 256, 3))
                img = np.clip(img + rng.normal(0, 10, img.shape), 0, 255).astype(np.uint8)
                Image.fromarray(img).save(root / split / name / f"{i}.png")
    return root


@pytest.mark.slow  # end to end (seconds); CI runs it with the slow suite
def test_supervised_reference_beats_chance_on_knn(texture_split, isolated_home):
    spec = SupervisedSpec(steps=80, batch_size=16, lr=2e-3, seed=0)
    model = ModelHandle("supervised", train_supervised(spec, texture_split, progress=False),
                        {"method": "supervised", "context": "supervised"})
    knn = build_protocol("knn", "synth", {"dataset": "imagefolder", "feature": "cls", "ks": [5], "progress": False})
    top1 = evaluate(model, knn, texture_split)[0][0]["metrics"]["top1"]
    chance = evaluate(ChanceModel(), knn, texture_split)[0][0]["metrics"]["top1"]
    assert chance == 25.0 and top1 >= 2 * chance, (top1, chance)


def test_the_default_suite_shows_every_context_row(tmp_path):
    from harness.running.suite import check_model_entry, load_suite

    suite, _ = load_suite(Path(__file__).resolve().parent.parent / "configs" / "suites" / "default.yaml")
    data = SuiteData(tmp_path, tmp_path, "x")
    for entry in suite.models:
        check_model_entry(entry, data)  # a typo in a context row's settings fails here
    from harness.models.zoo import load_zoo

    kinds = {k for e in suite.models for k in ("chance", "pixels", "random_init", "supervised")
             if getattr(e, k) is not None}
    # the supervised reference ships as a zoo checkpoint, trained like the methods it stands beside
    kinds |= {"supervised" for e in suite.models if e.zoo and load_zoo()[e.zoo].method == "supervised"}
    assert kinds == {"chance", "pixels", "random_init", "supervised"}
    assert sum(e.random_init is not None for e in suite.models) == 3  # the baseline's own noise shows
