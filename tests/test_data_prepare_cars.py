"""`ssl-bench data prepare cars` on a tiny devkit release in the official packing
(tests/official_archives.py): torchvision's StanfordCars layout, read by the ``cars`` reader and by
torchvision's own class, idempotent, the download untouched; an archive missing an image the
annotation file names is one error line and exit 2."""
from __future__ import annotations

import tarfile

from harness.cli import main
from harness.data.check import check_root
from harness.registry import DATASETS
from official_archives import snapshot, write_cars_all_images, write_cars_download
from official_split_fixtures import CARS_RECORDS


def _only_official_sizes_differ(key: str, root) -> None:
    report = check_root(key, root)
    assert report.problems and all("official" in p for p in report.problems), report.text()


def test_cars_round_trip(tmp_path, capsys):
    from torchvision.datasets import StanfordCars

    download = tmp_path / "download"
    classes = write_cars_download(download)
    before = snapshot(download)
    out = tmp_path / "cars"
    main(["data", "prepare", "cars", "--from", str(download), "--out", str(out)])
    assert "cars: done (train images 5, test images 3)" in capsys.readouterr().out
    _only_official_sizes_differ("cars", out)
    for split in ("train", "test"):
        ours = DATASETS.get("cars")(out, split)
        assert ours.targets == [c - 1 for c in classes[split]]
        theirs = StanfordCars(str(out), split=split)
        assert ours.targets == [t for _, t in theirs._samples] and ours.classes == theirs.classes
    main(["data", "prepare", "cars", "--from", str(download), "--out", str(out)])
    assert "cars: done before, skipped" in capsys.readouterr().out
    assert snapshot(download) == before


def test_cars_archive_missing_an_annotated_image(tmp_path, capsys):
    download = tmp_path / "download"
    write_cars_download(download)
    with tarfile.open(download / "cars_test.tgz", "w:gz"):
        pass  # an empty archive where the test images belong
    assert main(["data", "prepare", "cars", "--from", str(download), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "cars_test.tgz lacks 3 image(s) that cars_test_annos_withlabels.mat names" in err[0]


def test_the_all_images_release_beside_the_devkit_one(tmp_path, capsys):
    download = tmp_path / "download"
    write_cars_download(download)
    write_cars_all_images(download)
    out = tmp_path / "cars"
    main(["data", "prepare", "cars:annos", "--from", str(download), "--out", str(out)])
    text = capsys.readouterr().out
    assert "car_ims: done (images 7)" in text and "cars: done (train images 5, test images 3)" in text
    for key in ("cars", "cars:annos"):
        report = check_root(key, out)
        assert report.problems and all("official" in p for p in report.problems), report.text()
    test = DATASETS.get("cars_annos")(out, "test")
    assert test.targets == [c - 1 for c, t, _ in CARS_RECORDS if t == 1]


def test_a_download_of_neither_release(tmp_path, capsys):
    (tmp_path / "dl").mkdir()
    assert main(["data", "prepare", "cars", "--from", str(tmp_path / "dl"), "--out", str(tmp_path / "o")]) == 2
    assert "holds neither Stanford Cars release" in capsys.readouterr().err
