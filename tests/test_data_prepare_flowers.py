"""`ssl-bench data prepare flowers` on a tiny download in the official packing
(tests/official_archives.py): torchvision's layout, read by the ``flowers`` and ``flowers:ibot``
readers and by torchvision's own class, idempotent, the download untouched; a file that is not the
official one (its md5) is one error line and exit 2."""
from __future__ import annotations

import pytest

from harness.cli import main
from harness.data.check import check_root
from harness.registry import DATASETS
from official_archives import snapshot, write_flowers_download
from official_split_fixtures import FLOWERS_LABELS, FLOWERS_SETID


def _only_official_sizes_differ(key: str, root) -> None:
    report = check_root(key, root)
    assert report.problems and all("official" in p for p in report.problems), report.text()


@pytest.fixture
def flowers(tmp_path, monkeypatch):
    from torchvision.datasets import Flowers102

    sums = write_flowers_download(tmp_path / "download")
    monkeypatch.setattr(Flowers102, "_file_dict", {k: (f, sums[f]) for k, (f, _) in Flowers102._file_dict.items()})
    return tmp_path / "download"


def test_flowers_round_trip(flowers, tmp_path, capsys):
    from torchvision.datasets import Flowers102

    before = snapshot(flowers)
    out = tmp_path / "flowers"
    main(["data", "prepare", "flowers", "--from", str(flowers), "--out", str(out)])
    assert "flowers: done (images 10)" in capsys.readouterr().out
    _only_official_sizes_differ("flowers", out)
    _only_official_sizes_differ("flowers:ibot", out)
    test = DATASETS.get("flowers")(out, "test")
    assert test.targets == [FLOWERS_LABELS[i - 1] - 1 for i in FLOWERS_SETID["tstid"]]
    theirs = Flowers102(str(out), split="test")  # checks the three files' md5s itself
    assert [p.name for p in test.image_paths] == [p.name for p in theirs._image_files]
    main(["data", "prepare", "flowers", "--from", str(flowers), "--out", str(out)])
    assert "flowers: done before, skipped" in capsys.readouterr().out
    assert snapshot(flowers) == before


def test_flowers_file_that_is_not_the_official_one(flowers, tmp_path, capsys):
    (flowers / "setid.mat").write_bytes((flowers / "setid.mat").read_bytes() + b"\0")
    assert main(["data", "prepare", "flowers", "--from", str(flowers), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "setid.mat is not the official file" in err[0]
