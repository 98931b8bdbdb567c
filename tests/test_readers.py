"""Dataset readers on SynthScenes' real-dataset layouts, and their error messages."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from harness.data import (
    ADE20KSegmentation, CaptionGroups, ImageFolderDataset, VOCSegmentation,
    load_label_png, load_rgb,
)
from harness.data.synthetic import PRESETS, SEG_CLASSES, THING_CLASSES, voc_palette
from harness.errors import DataError
from harness.registry import DATASETS

TINY = PRESETS["tiny"]


@pytest.fixture(scope="module")
def pristine(synth_tiny) -> Path:
    return synth_tiny  # the session's; tests that damage data use `synth`, a private copy


@pytest.fixture
def synth(pristine, tmp_path) -> Path:
    """A private copy that a test may damage."""
    return Path(shutil.copytree(pristine, tmp_path / "synth"))


def test_registry_names():
    assert DATASETS.get("voc") is VOCSegmentation
    assert DATASETS.get("ade20k") is ADE20KSegmentation
    assert DATASETS.get("imagefolder") is ImageFolderDataset
    assert DATASETS.get("imagenet") is ImageFolderDataset
    assert DATASETS.get("captions") is CaptionGroups


# ----------------------------------------------------------------------------- VOC
def test_voc_reads_synthscenes(pristine):
    ds = VOCSegmentation(pristine, "train")
    assert len(ds) == TINY.scene_train and ds.stems[0] == "train_000000"
    assert ds.num_classes == 16 and ds.class_names == SEG_CLASSES and ds.ignore_index == 255
    assert ds.is_synthetic
    img, mask = ds[0]
    assert img.mode == "RGB" and img.size == (64, 64)
    assert mask.shape == (64, 64) and mask.dtype == np.uint8 and mask.max() < 16
    assert len(VOCSegmentation(pristine, "val")) == TINY.scene_val
    aug = VOCSegmentation(pristine, "trainaug")
    np.testing.assert_array_equal(aug.load_mask(3), ds.load_mask(3))


def test_voc_root_forms_and_fingerprint(pristine, tmp_path):
    a = VOCSegmentation(pristine, "val")
    b = VOCSegmentation(pristine / "VOC2012", "val")
    devkit = tmp_path / "data" / "VOCdevkit"
    devkit.mkdir(parents=True)
    (devkit / "VOC2012").symlink_to(pristine / "VOC2012")
    c = VOCSegmentation(tmp_path / "data", "val")
    assert a.stems == b.stems == c.stems
    assert a.fingerprint() == b.fingerprint() and len(a.fingerprint()) == 16
    assert a.fingerprint() != VOCSegmentation(pristine, "train").fingerprint()
    # Outside a SynthScenes root (no meta.json) the real VOC classes apply, and a
    # different label set is a different dataset.
    assert c.num_classes == 21 and c.class_names[0] == "background" and not c.is_synthetic
    assert c.fingerprint() != a.fingerprint()


def test_voc_mask_is_palette_index_not_colour(tmp_path):
    labels = np.array([[0, 1], [15, 255]], dtype=np.uint8)
    im = Image.fromarray(labels)
    scrambled = voc_palette()[::-1]  # colours unrelated to the indices
    im.putpalette(scrambled)
    im.save(tmp_path / "m.png")
    np.testing.assert_array_equal(load_label_png(tmp_path / "m.png"), labels)
    Image.fromarray(np.zeros((2, 2, 3), np.uint8)).save(tmp_path / "rgb.png")
    with pytest.raises(DataError, match="mode 'RGB'"):
        load_label_png(tmp_path / "rgb.png")


def test_subset(pristine):
    ds = VOCSegmentation(pristine, "train")
    sub = ds.subset(["train_000004", "train_000001"])
    assert type(sub) is VOCSegmentation and len(sub) == 2 and len(ds) == TINY.scene_train
    assert sub.stems == ["train_000004", "train_000001"]
    np.testing.assert_array_equal(sub.load_mask(0), ds.load_mask(4))
    assert sub.fingerprint() != ds.fingerprint()
    with pytest.raises(DataError, match="val_000000") as err:
        ds.subset(["train_000001", "val_000000"])
    assert "1 stem" in str(err.value)


# ----------------------------------------------------------------------------- ADE20K
def test_ade_reads_synthscenes_with_reduce_zero_label(pristine):
    ade = ADE20KSegmentation(pristine, "training")
    voc = VOCSegmentation(pristine, "train")
    assert ade.split == "training" and ade.stems == voc.stems
    assert ade.num_classes == 16 and ade.class_names == SEG_CLASSES
    for i in (0, 5):
        np.testing.assert_array_equal(ade.load_mask(i), voc.load_mask(i))
    assert ADE20KSegmentation(pristine / "ADEChallengeData2016", "val").split == "validation"
    assert ADE20KSegmentation(pristine, "val").fingerprint() != ade.fingerprint()


def test_ade_reduce_zero_label_mapping(synth):
    ds = ADE20KSegmentation(synth, "validation")
    raw = np.array([[0, 1, 2], [16, 0, 7]], dtype=np.uint8)
    Image.fromarray(raw).save(ds.mask_paths[0])
    Image.new("RGB", (3, 2)).save(ds.image_paths[0])  # a mask has its image's size
    np.testing.assert_array_equal(ds.load_mask(0), [[255, 0, 1], [15, 255, 6]])


def test_ade_raw_label_out_of_range(synth):
    ds = ADE20KSegmentation(synth, "validation")
    Image.fromarray(np.full((4, 4), 17, np.uint8)).save(ds.mask_paths[1])
    with pytest.raises(DataError, match=r"raw label 17.*num_classes=16") as err:
        ds.load_mask(1)
    assert ds.mask_paths[1].name in str(err.value)


def test_ade_real_class_names_without_meta(synth):
    (synth / "meta.json").unlink()
    ds = ADE20KSegmentation(synth, "training")
    assert ds.num_classes == 150 and ds.class_names[0] == "wall" and ds.class_names[-1] == "flag"


# ----------------------------------------------------------------------------- errors
def test_missing_root(tmp_path):
    for cls in (VOCSegmentation, ADE20KSegmentation):
        with pytest.raises(DataError, match="ssl-bench data synth") as err:
            cls(tmp_path / "nowhere", "val")
        assert str(tmp_path / "nowhere") in str(err.value)
    with pytest.raises(DataError, match="JPEGImages"):
        VOCSegmentation(tmp_path, "val")  # exists but holds no VOC layout
    with pytest.raises(DataError, match="does not exist"):
        ImageFolderDataset(tmp_path / "nowhere", "train")
    with pytest.raises(DataError, match="captions.jsonl"):
        CaptionGroups(tmp_path)


def test_unknown_split(pristine):
    with pytest.raises(DataError, match="trainaug"):
        VOCSegmentation(pristine, "test")
    with pytest.raises(DataError, match="training"):
        ADE20KSegmentation(pristine, "test")


def test_missing_split_file(synth):
    (synth / "VOC2012/ImageSets/Segmentation/val.txt").unlink()
    with pytest.raises(DataError, match=r"ImageSets/Segmentation/val\.txt"):
        VOCSegmentation(synth, "val")
    (synth / "VOC2012/ImageSets/Segmentation/trainaug.txt").unlink()
    with pytest.raises(DataError, match=r"trainaug\.txt or .*aug\.txt.*SegmentationClassAug"):
        VOCSegmentation(synth, "trainaug")
    shutil.rmtree(synth / "ADEChallengeData2016/annotations/validation")
    with pytest.raises(DataError, match="annotations/validation"):
        ADE20KSegmentation(synth, "validation")


def test_mmseg_aug_txt_accepted(synth):
    sets = synth / "VOC2012/ImageSets/Segmentation"
    (sets / "trainaug.txt").rename(sets / "aug.txt")
    assert len(VOCSegmentation(synth, "trainaug")) == TINY.scene_train


def test_listed_stem_without_image_or_mask(synth):
    (synth / "VOC2012/JPEGImages/val_000003.jpg").unlink()
    with pytest.raises(DataError, match="val_000003") as err:
        VOCSegmentation(synth, "val")
    assert "image" in str(err.value)
    (synth / "VOC2012/SegmentationClass/train_000002.png").unlink()
    with pytest.raises(DataError, match="train_000002") as err:
        VOCSegmentation(synth, "train")
    assert "mask" in str(err.value)
    (synth / "ADEChallengeData2016/annotations/training/train_000007.png").unlink()
    with pytest.raises(DataError, match="train_000007"):
        ADE20KSegmentation(synth, "training")


def test_corrupt_jpeg(synth):
    ds = VOCSegmentation(synth, "val")
    path = ds.image_paths[2]
    path.write_bytes(path.read_bytes()[: len(path.read_bytes()) // 2])  # truncated
    with pytest.raises(DataError, match=str(path.name)):
        ds.load_image(2)
    path.write_bytes(b"not a jpeg at all")
    with pytest.raises(DataError, match="corrupt"):
        load_rgb(path)


def test_mask_label_out_of_range(synth):
    ds = VOCSegmentation(synth, "val")
    labels = np.zeros((64, 64), np.uint8)
    labels[3, 3] = 20
    labels[4, 4] = 255  # ignore is allowed
    Image.fromarray(labels).save(ds.mask_paths[1])
    with pytest.raises(DataError, match=r"label 20 .*num_classes=16") as err:
        ds.load_mask(1)
    assert ds.mask_paths[1].name in str(err.value)
    labels[3, 3] = 0
    Image.fromarray(labels).save(ds.mask_paths[1])
    assert ds.load_mask(1)[4, 4] == 255


# ----------------------------------------------------------------------------- ImageFolder
def test_imagefolder_reads_synthscenes(pristine):
    ds = ImageFolderDataset(pristine / "imagenet", "train")
    assert ds.classes == sorted(THING_CLASSES) and ds.num_classes == 12
    assert len(ds) == TINY.object_train == len(ds.targets) == len(ds.image_paths)
    for (path, label), stem in zip(ds.samples, ds.stems):
        assert path.parent.name == ds.classes[label]
        assert stem == f"{path.parent.name}/{path.stem}"
    img, label = ds[0]
    assert img.mode == "RGB" and isinstance(label, int)
    val = ImageFolderDataset(pristine / "imagenet" / "val", split=None)
    assert len(val) == TINY.object_val and val.fingerprint() != ds.fingerprint()
    assert val.fingerprint() == ImageFolderDataset(pristine / "imagenet" / "val", None).fingerprint()


def test_imagefolder_matches_torchvision(pristine):
    torchvision = pytest.importorskip("torchvision")
    ours = ImageFolderDataset(pristine / "imagenet", "val")
    theirs = torchvision.datasets.ImageFolder(str(pristine / "imagenet" / "val"))
    assert ours.classes == theirs.classes
    assert [(str(p), t) for p, t in ours.samples] == [(p, t) for p, t in theirs.samples]


def test_imagefolder_extensions_and_empty_class(tmp_path):
    root = tmp_path / "inet" / "train"
    img = Image.fromarray(np.zeros((8, 8, 3), np.uint8))
    (root / "b").mkdir(parents=True)
    (root / "a" / "nested").mkdir(parents=True)
    img.save(root / "a" / "x.JPEG", "JPEG")
    img.save(root / "a" / "nested" / "y.png")
    img.save(root / "b" / "z.jpeg", "JPEG")
    (root / "b" / "notes.txt").write_text("not an image")
    ds = ImageFolderDataset(tmp_path / "inet", "train")
    assert ds.classes == ["a", "b"] and ds.targets == [0, 0, 1]
    assert ds.stems == ["a/x", "a/nested/y", "b/z"]  # torchvision's order: sorted(os.walk)
    torchvision = pytest.importorskip("torchvision")
    assert [str(p) for p in ds.image_paths] == [p for p, _ in torchvision.datasets.ImageFolder(str(root)).samples]
    (root / "c").mkdir()
    with pytest.raises(DataError, match="class folder"):
        ImageFolderDataset(tmp_path / "inet", "train")
    with pytest.raises(DataError, match="val"):
        ImageFolderDataset(tmp_path / "inet", "val")


# ----------------------------------------------------------------------------- captions
def test_captions_read_synthscenes(pristine):
    for where in (pristine, pristine / "captions", pristine / "captions" / "captions.jsonl"):
        cg = CaptionGroups(where)
        assert len(cg.groups) == TINY.caption_groups
        assert len(cg) == TINY.caption_groups * TINY.renders_per_caption
    assert cg.group_ids[:5] == [0, 0, 0, 0, 1]
    assert cg.group_members()[1] == [4, 5, 6, 7]
    assert cg.captions[4] == cg.groups[1].caption
    img, gid = cg[5]
    assert img.size == (64, 64) and gid == 1
    assert len(cg.fingerprint()) == 16
    assert DATASETS.get("captions")(pristine, "train").fingerprint() == cg.fingerprint()


def _write_captions(synth: Path, lines: list[str]) -> Path:
    path = synth / "captions" / "captions.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_captions_malformed_line(synth):
    good = json.dumps({"caption": "a striped disc on waves", "group_id": 0,
                       "images": ["images/cap_000000_0.jpg"]})
    _write_captions(synth, [good, "", '{"caption": "x", "group_id": 1, "images": [}'])
    with pytest.raises(DataError, match=r"captions\.jsonl:3: not valid JSON"):
        CaptionGroups(synth / "captions")
    _write_captions(synth, [good, json.dumps({"caption": "x", "images": ["images/cap_000000_1.jpg"]})])
    with pytest.raises(DataError, match=r":2: missing key\(s\) group_id"):
        CaptionGroups(synth / "captions")
    _write_captions(synth, [good, good.replace("cap_000000_0", "cap_000000_1")])
    with pytest.raises(DataError, match="group_id 0 already used on line 1"):
        CaptionGroups(synth / "captions")


def test_captions_missing_image(synth):
    (synth / "captions/images/cap_000002_1.jpg").unlink()
    with pytest.raises(DataError, match=r"captions\.jsonl:3: image .*cap_000002_1\.jpg does not exist"):
        CaptionGroups(synth)
