"""SynthScenes generator: determinism, layouts, pixel-exact masks, balance, colour independence."""
from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from harness.data import synthetic as syn
from harness.data.synthetic import (
    GENERATOR_VERSION, NUM_STUFF, PRESETS, SEG_CLASSES, THING_CLASSES, default_root, generate, pretrain_image_paths,
)
from harness.errors import ConfigError, DataError

TINY = PRESETS["tiny"]


@pytest.fixture(scope="module")
def tiny(synth_tiny) -> Path:
    return synth_tiny  # the session's tiny, seed 0 (read only here); tiny_again is a second generation


@pytest.fixture(scope="module")
def tiny_again(tmp_path_factory) -> Path:
    return generate(tmp_path_factory.mktemp("synth") / "tiny", preset="tiny", seed=0, progress=False)


@pytest.fixture(scope="module")
def tiny_seed1(tmp_path_factory) -> Path:
    return generate(tmp_path_factory.mktemp("synth") / "tiny", preset="tiny", seed=1, progress=False)


SAMPLE_FILES = [
    "VOC2012/JPEGImages/train_000000.jpg", "VOC2012/JPEGImages/val_000003.jpg",
    "VOC2012/SegmentationClass/train_000001.png", "ADEChallengeData2016/annotations/validation/val_000002.png",
    "imagenet/train/striped_disc/obj_train_000000.jpg", "captions/images/cap_000001_2.jpg",
    "captions/captions.jsonl", "scenes.jsonl",
]


# ----------------------------------------------------------------------------- layout
def test_layout_and_meta(tiny):
    meta = json.loads((tiny / "meta.json").read_text())
    assert meta["generator"] == "synthscenes" and meta["preset"] == "tiny" and meta["seed"] == 0
    assert meta["image_size"] == 64
    assert meta["classes"]["voc"] == list(SEG_CLASSES) and len(SEG_CLASSES) == 16
    assert len(meta["classes"]["things"]) >= 12 and len(meta["classes"]["stuff"]) >= 4
    voc = tiny / "VOC2012"
    assert len(list((voc / "JPEGImages").glob("*.jpg"))) == TINY.scene_train + TINY.scene_val
    assert len(list((voc / "SegmentationClass").glob("*.png"))) == TINY.scene_train + TINY.scene_val
    for split, n in (("train", TINY.scene_train), ("val", TINY.scene_val)):
        assert len((voc / "ImageSets/Segmentation" / f"{split}.txt").read_text().split()) == n
    ade = tiny / "ADEChallengeData2016"
    assert len(list((ade / "images/training").glob("*.jpg"))) == TINY.scene_train
    assert len(list((ade / "annotations/validation").glob("*.png"))) == TINY.scene_val
    assert sorted(p.name for p in (tiny / "imagenet/train").iterdir()) == sorted(THING_CLASSES)
    assert len(list((tiny / "imagenet/val").rglob("*.jpg"))) == TINY.object_val
    lines = (tiny / "captions/captions.jsonl").read_text().splitlines()
    assert len(lines) == TINY.caption_groups
    # Mask formats: VOC palette PNG, ADE and aug grayscale.
    with Image.open(voc / "SegmentationClass/train_000000.png") as im:
        assert im.mode == "P"
    with Image.open(ade / "annotations/training/train_000000.png") as im:
        assert im.mode == "L"
    with Image.open(voc / "SegmentationClassAug/train_000000.png") as im:
        assert im.mode == "L"


def test_pretrain_list_is_train_only(tiny):
    paths = pretrain_image_paths(tiny)
    assert len(paths) == TINY.scene_train + TINY.object_train
    rel = [p.relative_to(tiny).as_posix() for p in paths]
    assert all(r.startswith(("VOC2012/JPEGImages/train_", "imagenet/train/")) for r in rel)
    assert not any("val" in r or "captions" in r for r in rel)


def test_pretrain_list_missing(tmp_path):
    with pytest.raises(DataError, match="pretrain.txt"):
        pretrain_image_paths(tmp_path)


# ----------------------------------------------------------------------------- determinism
def test_same_seed_same_bytes(tiny, tiny_again):
    for rel in SAMPLE_FILES + ["meta.json", "pretrain.txt"]:
        assert (tiny / rel).read_bytes() == (tiny_again / rel).read_bytes(), rel


def test_other_seed_other_bytes(tiny, tiny_seed1):
    for rel in SAMPLE_FILES[:6]:
        assert (tiny / rel).read_bytes() != (tiny_seed1 / rel).read_bytes(), rel


def test_process_pool_writes_the_same_bytes(tiny, tmp_path, monkeypatch):
    monkeypatch.setattr(syn, "_POOL_MIN_JOBS", 0)  # force the pool even for tiny
    pooled = generate(tmp_path / "pooled", preset="tiny", seed=0, progress=False, workers=2)
    files = sorted(p.relative_to(tiny) for p in tiny.rglob("*") if p.is_file())
    assert files == sorted(p.relative_to(pooled) for p in pooled.rglob("*") if p.is_file())
    for rel in files:
        assert (tiny / rel).read_bytes() == (pooled / rel).read_bytes(), rel


def test_idempotent_and_refuses_other_dataset(tiny):
    before = (tiny / "meta.json").stat().st_mtime_ns
    assert generate(tiny, preset="tiny", seed=0, progress=False) == tiny
    assert (tiny / "meta.json").stat().st_mtime_ns == before
    with pytest.raises(DataError, match="different SynthScenes dataset"):
        generate(tiny, preset="tiny", seed=5, progress=False)


def test_non_empty_foreign_dir_refused(tmp_path):
    (tmp_path / "x.txt").write_text("mine")
    with pytest.raises(DataError, match="not empty"):
        generate(tmp_path, preset="tiny", progress=False)


def test_interrupted_run_leaves_nothing(tmp_path, monkeypatch):
    def boom(root, cfg, seed, progress, workers):
        (root / "VOC2012").mkdir(parents=True)
        (root / "VOC2012" / "half.jpg").write_bytes(b"x")
        raise KeyboardInterrupt

    monkeypatch.setattr(syn, "_write_all", boom)
    with pytest.raises(KeyboardInterrupt):
        generate(tmp_path / "out", preset="tiny", progress=False)
    assert not (tmp_path / "out").exists()
    assert list(tmp_path.iterdir()) == []


def test_stale_temp_dir_of_dead_process_is_removed(tmp_path):
    stale = tmp_path / ".out.tmp-999999999"  # no such pid
    (stale / "VOC2012").mkdir(parents=True)
    generate(tmp_path / "out", preset="tiny", progress=False)
    assert not stale.exists() and (tmp_path / "out" / "meta.json").is_file()


def test_unknown_preset():
    with pytest.raises(ConfigError, match="small"):
        generate(Path("/nonexistent"), preset="huge")


def test_default_root(monkeypatch, tmp_path):
    monkeypatch.setenv("SSL_BENCH_HOME", str(tmp_path))
    assert default_root("small", 3) == tmp_path / "data" / f"synthscenes-small-s3-v{GENERATOR_VERSION}"


# ----------------------------------------------------------------------------- content
def _mask(root: Path, stem: str) -> np.ndarray:
    with Image.open(root / "VOC2012/SegmentationClass" / f"{stem}.png") as im:
        return np.array(im)


def test_masks_are_pixel_exact(tiny):
    scenes = [json.loads(ln) for ln in (tiny / "scenes.jsonl").read_text().splitlines()]
    assert len(scenes) == TINY.scene_train + TINY.scene_val
    n_objects = Counter()
    for sc in scenes:
        mask = _mask(tiny, sc["stem"])
        labels = set(np.unique(mask).tolist())
        placed = {o["label"] for o in sc["objects"] if o["visible_px"] > 0}
        assert labels - set(range(NUM_STUFF)) == placed, sc["stem"]
        assert labels & set(range(NUM_STUFF)) <= {SEG_CLASSES.index(b) for b in sc["background"]}
        for o in sc["objects"]:  # classes are distinct within a scene: counts are exact
            assert int((mask == o["label"]).sum()) == o["visible_px"]
        n_objects[len(sc["objects"])] += 1
        # The PNG is lossless: it equals the generator's label map bit for bit.
        split, idx = sc["stem"].split("_")
        drawn = syn.draw_scene(0, split, int(idx), TINY.image_size, TINY.max_objects)
        np.testing.assert_array_equal(mask, drawn.label)
        # The JPEG shows the drawn image (up to compression).
        with Image.open(tiny / "VOC2012/JPEGImages" / f"{sc['stem']}.jpg") as im:
            err = np.abs(np.asarray(im, dtype=np.float32) - drawn.image.astype(np.float32)).mean()
        assert err < 6, (sc["stem"], err)
    assert set(n_objects) <= {1, 2, 3, 4} and len(n_objects) >= 3


def test_occlusion_keeps_objects_visible():
    # Crowded scenes: later objects cover earlier ones, each keeps a visible part.
    for i in range(60):
        d = syn.draw_scene(7, "train", i, 64, 4)
        assert all(o["visible_px"] > 0 for o in d.objects)
        labels = set(np.unique(d.label).tolist())
        assert {o["label"] for o in d.objects} <= labels


def test_ade_labels_are_voc_labels_plus_one(tiny):
    for stem in ("train_000000", "train_000005"):
        with Image.open(tiny / "ADEChallengeData2016/annotations/training" / f"{stem}.png") as im:
            ade = np.array(im)
        np.testing.assert_array_equal(ade, _mask(tiny, stem).astype(np.int64) + 1)
        assert ade.min() >= 1  # 0 ("other") is never written
        assert (tiny / "ADEChallengeData2016/images/training" / f"{stem}.jpg").read_bytes() == \
            (tiny / "VOC2012/JPEGImages" / f"{stem}.jpg").read_bytes()


def test_object_centric_labels_and_balance(tiny):
    for split, n in (("train", TINY.object_train), ("val", TINY.object_val)):
        files = sorted((tiny / "imagenet" / split).rglob("*.jpg"))
        assert len(files) == n
        counts = Counter(p.parent.name for p in files)
        assert set(counts) == set(THING_CLASSES) and len(set(counts.values())) == 1
        for p in files[:8]:
            idx = int(p.stem.rsplit("_", 1)[1])
            d = syn.draw_object(0, split, idx, 64)
            assert [o["class"] for o in d.objects] == [p.parent.name]
            # One large object: at least an eighth of the image.
            assert d.objects[0]["visible_px"] > 64 * 64 / 8
    for preset in PRESETS.values():
        assert preset.object_train % len(THING_CLASSES) == 0
        assert preset.object_val % len(THING_CLASSES) == 0


def test_colour_does_not_predict_class():
    """Nearest-centroid on an object's mean colour must stay near chance (1/12)."""
    feats, labels = [], []
    for i in range(600):
        d = syn.draw_object(11, "train", i, 64)
        obj = d.label >= NUM_STUFF
        feats.append(d.image[obj].mean(axis=0))
        labels.append(d.label[obj][0] - NUM_STUFF)
    x, y = np.array(feats), np.array(labels)
    fit, test = slice(0, 300), slice(300, 600)
    centroids = np.stack([x[fit][y[fit] == c].mean(0) for c in range(12)])
    pred = np.argmin(((x[test][:, None] - centroids[None]) ** 2).sum(-1), axis=1)
    accuracy = (pred == y[test]).mean()
    assert accuracy < 0.2, accuracy
    # Per-class mean colours (50 objects each) all lie close to the overall mean; the
    # standard error of one class mean is about 7 grey levels.
    class_means = np.stack([x[y == c].mean(0) for c in range(12)])
    spread = np.abs(class_means - x.mean(0)).max()
    assert spread < 30, spread


def test_captions_are_multi_positive_groups(tiny):
    groups = [json.loads(ln) for ln in (tiny / "captions/captions.jsonl").read_text().splitlines()]
    assert len({g["caption"] for g in groups}) == len(groups)  # no duplicate descriptions
    specs = syn.caption_specs(0, TINY.caption_groups, TINY.max_caption_objects)
    for g, (things, stuff) in zip(groups, specs):
        assert len(g["images"]) == TINY.renders_per_caption
        assert g["caption"] == syn.caption_text(things, stuff)
        blobs = {(tiny / "captions" / p).read_bytes() for p in g["images"]}
        assert len(blobs) == len(g["images"])  # renders differ
        for k in range(TINY.renders_per_caption):
            d = syn.draw_caption_render(0, g["group_id"], k, things, stuff, 64)
            assert sorted(o["label"] - NUM_STUFF for o in d.objects) == things
            assert sorted(SEG_CLASSES.index(b) for b in d.background) == stuff


def test_caption_text():
    striped_disc, dotted_square = THING_CLASSES.index("striped_disc"), THING_CLASSES.index("dotted_square")
    assert syn.caption_text([striped_disc, dotted_square], [1]) == "a striped disc and a dotted square on waves"
    assert syn.caption_text([striped_disc], [0, 3]) == "a striped disc on noise and wood grain"


def test_classes_are_shape_times_texture():
    assert len(THING_CLASSES) == len(syn.SHAPES) * len(syn.TEXTURES) >= 12
    assert len(set(THING_CLASSES)) == len(THING_CLASSES)
    assert SEG_CLASSES[:NUM_STUFF] == syn.STUFF_CLASSES


def test_voc_palette_matches_pascal():
    pal = syn.voc_palette()
    assert pal[:9] == [0, 0, 0, 128, 0, 0, 0, 128, 0] and pal[255 * 3:] == [224, 224, 192]
