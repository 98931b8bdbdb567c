"""`ssl-bench data prepare cifar10 / cifar100` on tiny archives in the official packing
(tests/official_archives.py): extracted and verified against the md5s torchvision's classes record
(here the fixtures' md5s), read by the readers, idempotent, the download untouched; a damaged member
or a truncated archive is one error line and exit 2."""
from __future__ import annotations

import numpy as np
import pytest

from harness.cli import main
from harness.data.check import check_root
from harness.registry import DATASETS
from official_archives import md5, snapshot, write_cifar_download


@pytest.fixture(params=["cifar10", "cifar100"])
def download(request, tmp_path, monkeypatch):
    """The key's fixture archive, with torchvision's md5 records set to the fixture's."""
    from torchvision.datasets import CIFAR10, CIFAR100

    key = request.param
    written = write_cifar_download(tmp_path / "download", key)
    official = {"cifar10": CIFAR10, "cifar100": CIFAR100}[key]
    sums = written["members"]
    monkeypatch.setattr(official, "tgz_md5", written["tgz_md5"])
    monkeypatch.setattr(official, "train_list", [[n, sums[n]] for n, _ in official.train_list])
    monkeypatch.setattr(official, "test_list", [[n, sums[n]] for n, _ in official.test_list])
    monkeypatch.setattr(official, "meta", {**official.meta, "md5": sums[official.meta["filename"]]})
    return key, written


def test_extracted_verified_and_read(download, tmp_path, capsys):
    from torchvision.datasets import CIFAR10, CIFAR100

    key, written = download
    folder = written["archive"].parent
    before = snapshot(folder)
    out = tmp_path / key
    main(["data", "prepare", key, "--from", str(folder), "--out", str(out)])
    assert "extract: done (files " in capsys.readouterr().out
    report = check_root(key, out)
    assert report.problems and all("official" in p for p in report.problems), report.text()
    ours = DATASETS.get(key)(out, "train")
    theirs = (CIFAR10 if key == "cifar10" else CIFAR100)(str(out), train=True)  # verifies the md5s again
    assert ours.targets == list(theirs.targets)
    assert np.array_equal(np.asarray(ours.load_image(3)), theirs.data[3])
    main(["data", "prepare", key, "--from", str(folder), "--out", str(out)])
    assert "extract: done before, skipped" in capsys.readouterr().out
    assert snapshot(folder) == before


def test_a_member_that_is_not_the_official_file_is_refused(download, tmp_path, monkeypatch, capsys):
    key, written = download
    from torchvision.datasets import CIFAR10, CIFAR100

    official = CIFAR10 if key == "cifar10" else CIFAR100
    name = official.test_list[0][0]
    monkeypatch.setattr(official, "test_list", [[name, "0" * 32]])
    out = tmp_path / key
    assert main(["data", "prepare", key, "--from", str(written["archive"].parent), "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"{name} is not the official file" in err[0]
    assert not list(out.glob(".staging-*")) and not (out / official.base_folder).exists()


def test_a_truncated_archive_is_one_error(download, tmp_path, monkeypatch, capsys):
    key, written = download
    from torchvision.datasets import CIFAR10, CIFAR100

    archive = written["archive"]
    data = archive.read_bytes()
    archive.write_bytes(data[: len(data) // 2])
    monkeypatch.setattr(CIFAR10 if key == "cifar10" else CIFAR100, "tgz_md5", md5(archive))
    assert main(["data", "prepare", key, "--from", str(archive.parent), "--out", str(tmp_path / key)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "cannot be extracted" in err[0]
