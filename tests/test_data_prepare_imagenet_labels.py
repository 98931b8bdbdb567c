"""`ssl-bench data prepare imagenet` with ReaL's real.json and SimCLRv2's 1% / 10% lists in the
download (tests/official_archives.py): they land where the robustness protocol's ``real_labels``
and ``train_subset`` read them, a list or label file that does not belong is refused, and `data
check` names a listed training image absent from train/."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.cli import main
from harness.data import subsets
from harness.data.check import check_root
from harness.registry import DATASETS
from official_archives import snapshot, write_imagenet_labels
from official_downloads import write_imagenet


@pytest.fixture
def download(tmp_path, monkeypatch) -> tuple[Path, dict]:
    """The ImageNet fixture with the label files; torchvision's md5 check and subsets' sha256 record
    are the fixtures' (they are not the official files)."""
    import torchvision.datasets.imagenet as tv

    monkeypatch.setattr(tv, "_verify_archive", lambda *args: None)
    folder = tmp_path / "download"
    wnids = write_imagenet(folder)
    train = [f"{w}_{k}.JPEG" for w in sorted(set(wnids)) for k in (1, 2)]
    written = write_imagenet_labels(folder, wnids, train)
    for fname, name in (("1percent.txt", "imagenet_1pct"), ("10percent.txt", "imagenet_10pct")):
        raw = (folder / fname).read_bytes()
        monkeypatch.setitem(subsets.KNOWN, name, subsets.KnownSubset(
            f"imagenet_subsets/{fname}", subsets.hashlib.sha256(raw).hexdigest(), len(written[fname])))
    return folder, written


def _prepare(download: Path, out: Path) -> int:
    return main(["data", "prepare", "imagenet", "--from", str(download), "--out", str(out)])


def test_real_and_subsets_land_where_the_protocols_read_them(download, tmp_path, capsys):
    folder, written = download
    before = snapshot(folder)
    out = tmp_path / "imagenet"
    _prepare(folder, out)
    log = capsys.readouterr().out
    assert "real: done (ReaL entries 6, without label 1)" in log
    assert "subsets: done (imagenet_1pct 2, imagenet_10pct 4)" in log
    assert json.loads((out / "real.json").read_text()) == written["real"]
    report = check_root("imagenet", out)
    assert "subset imagenet_1pct: 2 of 2 listed images in train/" in report.text()
    assert "ReaL labels: 6 entries, 1 without label" in report.text()
    assert all("official" in p for p in report.problems), report.text()
    subset = subsets.resolve(str(out / "subsets" / "imagenet_10pct.txt"))  # train_subset=<that path>
    assert subset.name == "imagenet_10pct" and sorted(subset.names) == written["10percent.txt"]
    source = subsets.SubsetSource(DATASETS.get("imagenet")(out, "train"), subset)
    assert len(source) == 4
    assert snapshot(folder) == before
    _prepare(folder, out)
    assert capsys.readouterr().out.count("done before, skipped") == 5


def test_an_edited_subset_list_is_refused(download, tmp_path, capsys):
    folder, _ = download
    (folder / "1percent.txt").write_text("n01000000_1.JPEG\n")
    assert _prepare(folder, tmp_path / "imagenet") == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "is not SimCLRv2's imagenet_subsets/1percent.txt" in err[0]


def test_real_labels_of_another_val_set_are_refused(download, tmp_path, capsys):
    folder, written = download
    (folder / "real.json").write_text(json.dumps(written["real"][:-1]))
    assert _prepare(folder, tmp_path / "imagenet") == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "real.json has 5 entries for 6 val images" in err[0]


def test_check_names_a_listed_image_absent_from_train(download, tmp_path, capsys):
    folder, written = download
    out = tmp_path / "imagenet"
    _prepare(folder, out)
    gone = written["1percent.txt"][0]
    next((out / "train").glob(f"*/{gone}")).unlink()
    capsys.readouterr()
    assert main(["data", "check", "imagenet", "--data-root", str(out)]) == 2
    text = capsys.readouterr().out
    assert "subset imagenet_1pct: 1 listed images absent from train/, e.g. " + gone in text
    assert "subset imagenet_10pct: 1 listed images absent" in text


def test_check_names_a_truncated_real_json(download, tmp_path, capsys):
    folder, _ = download
    out = tmp_path / "imagenet"
    _prepare(folder, out)
    raw = (out / "real.json").read_bytes()
    (out / "real.json").write_bytes(raw[: len(raw) // 2])
    capsys.readouterr()
    assert main(["data", "check", "imagenet", "--data-root", str(out)]) == 2
    assert "real.json is not JSON" in capsys.readouterr().out
