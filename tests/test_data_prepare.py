"""`ssl-bench data prepare` on tiny downloads in the official formats (tests/official_downloads.py):
the prepared root is read by the reader (and by torchvision's own ImageNet class), a second run
skips what is done, an interrupted one resumes, the download is never written into, and a val
folder with shuffled labels is caught by the devkit's ground truth."""
from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import pytest

from harness.cli import main
from harness.data.check import check_root
from harness.registry import DATASETS
from official_downloads import write_imagenet


@pytest.fixture
def trusted_archives(monkeypatch):
    """The fixtures are not the official archives: torchvision's md5 check is the one step skipped."""
    import torchvision.datasets.imagenet as tv

    monkeypatch.setattr(tv, "_verify_archive", lambda *args: None)


def _snapshot(folder: Path) -> dict[str, str]:
    return {p.relative_to(folder).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture
def imagenet_download(tmp_path) -> tuple[Path, list[str]]:
    return tmp_path / "download", write_imagenet(tmp_path / "download")


def _only_official_sizes_differ(key: str, root: Path) -> None:
    report = check_root(key, root)
    assert report.problems and all("official" in p for p in report.problems), report.text()
    assert "MISSING" not in report.text() and "BROKEN" not in report.text()


def test_imagenet_round_trip(imagenet_download, tmp_path, trusted_archives, capsys):
    from torchvision.datasets import ImageNet

    download, truth = imagenet_download
    before = _snapshot(download)
    out = tmp_path / "imagenet"
    main(["data", "prepare", "imagenet", "--from", str(download), "--out", str(out)])
    assert "val: done (val images 6)" in capsys.readouterr().out
    _only_official_sizes_differ("imagenet", out)  # the fixture's 3 classes are not ImageNet's 1,000
    val = DATASETS.get("imagenet")(out, "val")
    assert [val.classes[label] for _, label in sorted(val.samples, key=lambda s: Path(s[0]).name)] == truth
    theirs = ImageNet(str(out), split="val")  # torchvision's class reads the prepared root as it is
    assert [Path(p).name for p, _ in theirs.samples] == [Path(p).name for p, _ in val.samples]
    assert _snapshot(download) == before


def test_imagenet_second_run_skips_and_interrupted_run_resumes(imagenet_download, tmp_path, trusted_archives,
                                                              monkeypatch, capsys):
    import torchvision.datasets.imagenet as tv

    download, _ = imagenet_download
    out = tmp_path / "imagenet"
    real = tv.parse_val_archive

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(tv, "parse_val_archive", interrupted)
    assert main(["data", "prepare", "imagenet", "--from", str(download), "--out", str(out)]) == 130
    assert not (out / "val").exists() and not list(out.glob(".staging-*"))
    monkeypatch.setattr(tv, "parse_val_archive", real)
    main(["data", "prepare", "imagenet", "--from", str(download), "--out", str(out)])
    first = capsys.readouterr().out
    assert "devkit: done before, skipped" in first and "val: done" in first
    main(["data", "prepare", "imagenet", "--from", str(download), "--out", str(out)])
    assert capsys.readouterr().out.count("done before, skipped") == 3


def test_val_folder_with_shuffled_labels_is_refused(imagenet_download, tmp_path, trusted_archives, capsys):
    download, truth = imagenet_download
    good = tmp_path / "good"
    main(["data", "prepare", "imagenet", "--from", str(download), "--out", str(good)])
    hand_made = tmp_path / "hand_made"
    shutil.copytree(good / "val", hand_made / "val")
    a, b = sorted({w for w in truth})[:2]
    moved = sorted((hand_made / "val" / a).iterdir())[0]
    moved.rename(hand_made / "val" / b / moved.name)
    capsys.readouterr()
    assert main(["data", "prepare", "imagenet", "--from", str(download), "--out", str(hand_made)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "1 of the 6 val images" in err[0] and moved.name in err[0]


def test_out_inside_the_download_is_refused(imagenet_download, capsys):
    download, _ = imagenet_download
    before = _snapshot(download)
    assert main(["data", "prepare", "imagenet", "--from", str(download), "--out", str(download / "x")]) == 2
    assert "never written into" in capsys.readouterr().err
    assert _snapshot(download) == before


def test_a_download_without_its_archives_is_one_error(tmp_path, capsys):
    (tmp_path / "dl").mkdir()
    assert main(["data", "prepare", "imagenet", "--from", str(tmp_path / "dl"), "--out", str(tmp_path / "o")]) == 2
    assert "lacks ILSVRC2012_devkit_t12.tar.gz, ILSVRC2012_img_val.tar" in capsys.readouterr().err


def test_voc_with_sbd_as_mmsegs_converter(tmp_path, capsys):
    import tarfile

    import numpy as np
    from PIL import Image

    from harness.data.prepare_voc import SBD_DATASET, sbd_mask
    from official_downloads import write_voc_sbd

    download = tmp_path / "download"
    lists = write_voc_sbd(download)
    before = _snapshot(download)
    out = tmp_path / "voc"
    main(["data", "prepare", "voc:aug", "--from", str(download), "--out", str(out)])
    assert "sbd: done (SBD masks 8, trainaug 8, aug 5)" in capsys.readouterr().out
    _only_official_sizes_differ("voc:aug", out)
    _only_official_sizes_differ("voc", out)
    voc = out / "VOCdevkit" / "VOC2012"
    sets = voc / "ImageSets" / "Segmentation"
    trainaug = set(lists["train"] + lists["sbd_train"] + lists["sbd_val"]) - set(lists["val"])
    assert (sets / "trainaug.txt").read_text().split() == sorted(trainaug)
    assert (sets / "aug.txt").read_text().split() == sorted(trainaug - set(lists["train"]))
    reader = DATASETS.get("voc12aug")(out, "trainaug")
    with tarfile.open(download / "benchmark.tgz") as tar:
        sbd_id = lists["sbd_train"][-1]
        truth = sbd_mask(tar.extractfile(f"{SBD_DATASET}cls/{sbd_id}.mat").read())
    assert np.array_equal(reader.load_mask(reader.stems.index(sbd_id)), truth)
    only_voc = lists["train"][0]  # a VOC train id SBD lacks: its VOC mask, as indices
    voc_mask = np.asarray(Image.open(voc / "SegmentationClass" / f"{only_voc}.png"))
    assert np.array_equal(np.asarray(Image.open(voc / "SegmentationClassAug" / f"{only_voc}.png")), voc_mask)
    main(["data", "prepare", "voc:aug", "--from", str(download), "--out", str(out)])
    assert capsys.readouterr().out.count("done before, skipped") == 2
    assert _snapshot(download) == before


def test_voc_without_the_augmented_masks_is_named(tmp_path):
    import tarfile

    from official_downloads import write_voc_sbd

    write_voc_sbd(tmp_path / "download")
    with tarfile.open(tmp_path / "download" / "VOCtrainval_11-May-2012.tar") as tar:
        tar.extractall(tmp_path / "voc", filter="data")
    report = check_root("voc:aug", tmp_path / "voc")
    assert not report.ready and "split trainaug: MISSING" in report.text() and "SBD" in report.text()


def test_nyu_from_the_labelled_mat_as_bts_converts_it(tmp_path, capsys):
    pytest.importorskip("h5py")
    import numpy as np

    from official_downloads import write_nyu_labelled

    download = tmp_path / "download"
    written = write_nyu_labelled(download)
    before = _snapshot(download)
    out = tmp_path / "nyu"
    main(["data", "prepare", "nyu", "--from", str(download), "--out", str(out)])
    assert "labelled: done (train frames 3, test frames 3)" in capsys.readouterr().out
    report = check_root("nyu", out)
    assert [p for p in report.problems if "official" not in p] == [], report.text()
    test = DATASETS.get("nyu")(out, "test")
    assert len(test) == 3
    first = written["test"][0] - 1  # 0-based frame number
    k = [p.name for p in test.image_paths].index(f"rgb_{first:05d}.jpg")
    assert test.image_paths[k].parent.name == written["scenes"][first]
    depth = test.load_depth(k)
    truth = written["depths"][first].T
    assert np.allclose(depth, np.floor(truth * 1000) / 1000, atol=1e-6)  # uint16 millimetres
    image = np.asarray(test.load_image(k)).astype(int)
    assert image[:5].mean() < 8 and image[:, :5].mean() < 8  # BTS's black border (JPEG rings near its edge)
    inner = np.transpose(written["images"][first], (2, 1, 0))[7:-6, 7:-8].astype(int)
    assert np.abs(image[7:-6, 7:-8] - inner).mean() < 12  # JPEG
    assert _snapshot(download) == before


def test_data_check_catches_shuffled_val_labels_of_a_prepared_root(imagenet_download, tmp_path, trusted_archives):
    download, truth = imagenet_download
    out = tmp_path / "imagenet"
    main(["data", "prepare", "imagenet", "--from", str(download), "--out", str(out)])
    assert "val labels: 6 of 6 images in the devkit's class folder" in check_root("imagenet", out).text()
    a, b = sorted(set(truth))[:2]
    moved = sorted((out / "val" / a).iterdir())[0]
    moved.rename(out / "val" / b / moved.name)
    report = check_root("imagenet", out)
    assert any("1 val images in the wrong class folder" in p and moved.name in p for p in report.problems)


def _identity(root: Path) -> tuple:
    """What records and feature caches key the data by: the root's data identity, the reader's
    listing and classes, and its content stamp (file sizes and mtimes)."""
    from harness.data.io import content_stamp, data_identity, relative_listing

    val = DATASETS.get("imagenet")(root, "val")
    return (data_identity(root), relative_listing(val.image_paths, root), val.classes, content_stamp(val))


def test_a_prepared_root_and_a_hand_made_one_with_the_same_files_have_one_identity(imagenet_download, tmp_path,
                                                                                     trusted_archives):
    download, _ = imagenet_download
    prepared = tmp_path / "prepared"
    main(["data", "prepare", "imagenet", "--from", str(download), "--out", str(prepared)])
    hand_made = tmp_path / "hand_made"  # the same files, arranged by hand: no .prepared.json
    shutil.copytree(prepared, hand_made, ignore=shutil.ignore_patterns(".prepared.json"))  # copy2 keeps mtimes
    assert (prepared / ".prepared.json").is_file() and not (hand_made / ".prepared.json").exists()
    place = tmp_path / "data" / "imagenet"  # identity is read where the root is used
    place.parent.mkdir()
    prepared.rename(place)
    from_prepare = _identity(place)
    place.rename(prepared)
    hand_made.rename(place)
    assert _identity(place) == from_prepare
