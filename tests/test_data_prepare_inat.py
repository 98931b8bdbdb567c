"""`ssl-bench data prepare inat2018 / inat2019` on tiny downloads in the competition's packing
(tests/official_archives.py: the image archive and the JSON files as .json.tar.gz): read by the
readers as iBOT labels them, resumable step by step, the download untouched; an archive missing an
image the JSON lists is one error line and exit 2."""
from __future__ import annotations

import io
import tarfile

import pytest

from harness.cli import main
from harness.data.check import check_root
from harness.registry import DATASETS
from official_archives import md5, snapshot, write_inat_download
from official_split_fixtures import INAT_SPLITS


@pytest.fixture(params=[2018, 2019])
def download(request, tmp_path, monkeypatch):
    import torchvision.datasets.inaturalist as tv

    year = request.param
    written = write_inat_download(tmp_path / "download", year)
    monkeypatch.setitem(tv.DATASET_MD5, str(year), written["md5"])  # the fixture's, not the official archive's
    return year, tmp_path / "download"


def test_round_trip_and_resume(download, tmp_path, monkeypatch, capsys):
    from harness.data import archives

    year, folder = download
    key, out = f"inat{year}", tmp_path / "inat"
    before = snapshot(folder)

    def interrupted(*args):
        raise KeyboardInterrupt

    real = archives.extract
    monkeypatch.setattr(archives, "extract", interrupted)
    assert main(["data", "prepare", key, "--from", str(folder), "--out", str(out)]) == 130
    assert (out / f"train{year}.json").is_file() and not (out / f"train_val{year}").exists()
    monkeypatch.setattr(archives, "extract", real)
    main(["data", "prepare", key, "--from", str(folder), "--out", str(out)])
    log = capsys.readouterr().out
    assert "annotations: done before, skipped" in log and "images: done (images 7)" in log
    report = check_root(key, out)
    assert report.problems and all("official" in p for p in report.problems), report.text()
    val = DATASETS.get(key)(out, "val")
    first_seen = [c for _, c in INAT_SPLITS["train"]]
    order = list(dict.fromkeys(first_seen))  # classes in order of first appearance in train
    assert val.targets == [order.index(c) for _, c in INAT_SPLITS["val"]]
    assert snapshot(folder) == before


def test_an_archive_missing_a_listed_image_is_refused(download, tmp_path, monkeypatch, capsys):
    import torchvision.datasets.inaturalist as tv

    year, folder = download
    archive = folder / f"train_val{year}.tar.gz"
    with tarfile.open(archive) as tar:
        members = [(m, tar.extractfile(m).read() if m.isfile() else None) for m in tar.getmembers()]
    dropped = next(m.name for m, _ in members if m.isfile())
    with tarfile.open(archive, "w:gz") as tar:
        for member, data in members:
            if member.name != dropped:
                tar.addfile(member, io.BytesIO(data) if data is not None else None)
    monkeypatch.setitem(tv.DATASET_MD5, str(year), md5(archive))
    assert main(["data", "prepare", f"inat{year}", "--from", str(folder), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "lacks 1 image(s) the JSON files list" in err[0] and dropped in err[0]


def test_a_download_without_the_json_files_names_them(tmp_path, capsys):
    (tmp_path / "dl").mkdir()
    assert main(["data", "prepare", "inat2018", "--from", str(tmp_path / "dl"), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "lacks train2018.json, val2018.json, categories.json, train_val2018.tar.gz" in err
