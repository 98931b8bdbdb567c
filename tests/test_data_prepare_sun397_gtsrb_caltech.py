"""`ssl-bench data prepare` for SUN397, GTSRB and Caltech-101 on tiny downloads in the official
packing (tests/official_sun397_gtsrb_caltech.py): the reader's layout, passing `data check` but for the official
sizes, idempotent, the download untouched; a damaged or incomplete download is one error line and
exit 2."""
from __future__ import annotations

import numpy as np
import pytest

from harness.cli import main
from harness.data.check import check_root
from harness.data.prepare_caltech101 import draw
from harness.registry import DATASETS
from official_archives import md5, snapshot
from official_sun397_gtsrb_caltech import CALTECH, GTSRB_TRAIN, write_caltech101_download, write_gtsrb_download, \
    write_sun397_download


def _prepare(key, download, out) -> int:
    return main(["data", "prepare", key, "--from", str(download), "--out", str(out)])


def _only_official_sizes_differ(key: str, root) -> None:
    report = check_root(key, root)
    assert report.problems and all("official" in p for p in report.problems), report.text()


def _one_error_line(capsys, needle: str) -> None:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and needle in err[0], err


@pytest.fixture
def sun397(tmp_path, monkeypatch):
    from torchvision.datasets import SUN397

    write_sun397_download(tmp_path / "download")
    monkeypatch.setattr(SUN397, "_DATASET_MD5", md5(tmp_path / "download" / "SUN397.tar.gz"))
    return tmp_path / "download"


def test_sun397_round_trip(sun397, tmp_path, capsys):
    lists = write_sun397_download(tmp_path / "again")  # the same seeded files
    before = snapshot(sun397)
    out = tmp_path / "sun397"
    _prepare("sun397", sun397, out)
    assert "sun397: done (files 14)" in capsys.readouterr().out
    _only_official_sizes_differ("sun397", out)
    train = DATASETS.get("sun397")(out, "train")
    assert [p.relative_to(out).as_posix() for p in train.image_paths] == [p[1:] for p in lists["Training_01.txt"]]
    assert train.classes == ["abbey", "bakery/shop", "beach"]  # ClassName.txt's names, "/<letter>/" cut
    assert train.targets == [0, 0, 1, 1, 2, 2]
    assert not (out / "SUN397").exists() and not (out / "Training_02.txt").exists()
    _prepare("sun397", sun397, out)
    assert "sun397: done before, skipped" in capsys.readouterr().out
    assert snapshot(sun397) == before


def test_sun397_partition_naming_an_absent_image(sun397, tmp_path, capsys):
    import zipfile

    with zipfile.ZipFile(sun397 / "Partitions.zip", "w") as zf:
        zf.writestr("ClassName.txt", "/a/abbey\n")
        zf.writestr("Training_01.txt", "/a/abbey/sun_20.jpg\n")
        zf.writestr("Testing_01.txt", "/a/abbey/sun_gone.jpg\n")
    assert _prepare("sun397", sun397, tmp_path / "o") == 2
    _one_error_line(capsys, "lacks 1 image(s) that Testing_01.txt names, e.g. /a/abbey/sun_gone.jpg")


def test_sun397_archive_that_is_not_the_official_one(sun397, tmp_path, capsys):
    (sun397 / "SUN397.tar.gz").write_bytes((sun397 / "SUN397.tar.gz").read_bytes()[:100])
    assert _prepare("sun397", sun397, tmp_path / "o") == 2
    _one_error_line(capsys, "SUN397.tar.gz is not the official file")


@pytest.mark.parametrize("fixed", [True, False])
def test_gtsrb_round_trip(tmp_path, capsys, fixed):
    from torchvision.datasets import GTSRB

    download = tmp_path / "download"
    labels = write_gtsrb_download(download)
    if not fixed:
        (download / "GTSRB-Training_fixed.zip").unlink()
    before, out = snapshot(download), tmp_path / "gtsrb"
    _prepare("gtsrb", download, out)
    log = capsys.readouterr().out
    assert "train: done (images 6)" in log and "test: done (images 5)" in log
    assert ("gives 39,209" in log) is not fixed
    _only_official_sizes_differ("gtsrb", out)
    for split in ("train", "test"):
        ours, theirs = DATASETS.get("gtsrb")(out, split), GTSRB(str(out), split=split)  # torchvision's reader
        assert [(p.name, t) for p, t in ours.samples] == [(p.split("/")[-1], t) for p, t in theirs._samples]
    assert DATASETS.get("gtsrb")(out, "test").targets == labels
    assert DATASETS.get("gtsrb")(out, "train").targets == [c for c, n in GTSRB_TRAIN.items() for _ in range(n)]
    _prepare("gtsrb", download, out)
    assert capsys.readouterr().out.count("done before, skipped") == 2
    assert snapshot(download) == before


def test_gtsrb_truncated_zip(tmp_path, capsys):
    write_gtsrb_download(tmp_path / "d")
    (tmp_path / "d" / "GTSRB_Final_Test_Images.zip").write_bytes(b"PK\3\4 truncated")
    assert _prepare("gtsrb", tmp_path / "d", tmp_path / "o") == 2
    _one_error_line(capsys, "GTSRB_Final_Test_Images.zip cannot be")


def test_caltech101_round_trip(tmp_path, capsys):
    download = tmp_path / "download"
    write_caltech101_download(download)
    before, out = snapshot(download), tmp_path / "caltech101"
    _prepare("caltech101", download, out)
    assert "caltech101: done (images 120, classes 3, train 90" in capsys.readouterr().out
    assert main(["data", "check", "caltech101", "--data-root", str(out)]) == 0, capsys.readouterr().out
    train, test = DATASETS.get("caltech101")(out, "train"), DATASETS.get("caltech101")(out, "test")
    assert train.targets == [k for k in range(len(CALTECH)) for _ in range(30)]  # 30 draws with replacement
    drawn = {p.relative_to(out).as_posix() for p in train.image_paths}
    every = {f"caltech101/101_ObjectCategories/{c}/image_{k + 1:04d}.jpg" for c, n in CALTECH.items() for k in range(n)}
    assert drawn | {p.relative_to(out).as_posix() for p in test.image_paths} == every
    assert not drawn & {p.relative_to(out).as_posix() for p in test.image_paths}
    # the lines the official create_caltech101_splits writes: torchvision's ImageFolder order, the global stream
    from torchvision.datasets import ImageFolder

    folder = ImageFolder(str(out / "caltech101" / "101_ObjectCategories"))
    imgs = [("/".join(p.split("/")[-2:]), k) for p, k in folder.imgs]
    state = np.random.get_state()
    np.random.seed(0)
    picks = [int(i) for k in range(len(CALTECH))
             for i in np.sort(np.random.choice([j for j, (_, c) in enumerate(imgs) if c == k], 30))]
    np.random.set_state(state)
    assert (out / "train.txt").read_text() == "".join(f"{imgs[i][0]} {imgs[i][1]}\n" for i in picks)
    _prepare("caltech101", download, out)
    assert "caltech101: done before, skipped" in capsys.readouterr().out
    assert snapshot(download) == before


def test_caltech101_draw_is_the_legacy_global_stream():
    # create_caltech101_splits calls np.random.seed(0), then np.random.choice once per class
    labels = [0] * 40 + [1] * 7 + [2] * 31
    state = np.random.get_state()
    np.random.seed(0)
    expected = [int(i) for k, lo, n in ((0, 0, 40), (1, 40, 7), (2, 47, 31))
                for i in np.sort(np.random.choice(list(range(lo, lo + n)), 30))]
    np.random.set_state(state)
    train, test = draw(labels, 3)
    assert train == expected
    assert test == sorted(set(range(len(labels))) - set(expected))


def test_caltech101_without_the_archive(tmp_path, capsys):
    (tmp_path / "d").mkdir()
    assert _prepare("caltech101", tmp_path / "d", tmp_path / "o") == 2
    _one_error_line(capsys, "lacks caltech-101.zip")
