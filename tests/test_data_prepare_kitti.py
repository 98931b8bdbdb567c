"""`ssl-bench data prepare kitti` on a tiny download in the official packing (tests/official_kitti.py):
the toolbox's layout (split files, input/, gt_depth/ with the depth archive's train and val merged),
read by the ``kitti`` reader frame for frame, idempotent, the download untouched; an absent drive
zip or a truncated one is one error line and exit 2."""
from __future__ import annotations

import zipfile

import numpy as np
import pytest
from PIL import Image

from harness.cli import main
from harness.data.check import check_root
from harness.registry import DATASETS
from official_archives import snapshot
from official_kitti import DRIVES, truncate, write_kitti_download


def _prepare(download, out) -> int:
    return main(["data", "prepare", "kitti", "--from", str(download), "--out", str(out)])


@pytest.fixture
def download(tmp_path):
    write_kitti_download(tmp_path / "download")
    return tmp_path / "download"


def test_round_trip(download, tmp_path, capsys):
    before = snapshot(download)
    out = tmp_path / "kitti"
    _prepare(download, out)
    log = capsys.readouterr().out
    assert f"drive-{DRIVES['train']}: done (frames 6)" in log and "depth: done (depth maps 5)" in log
    report = check_root("kitti", out)
    assert report.problems and all("official" in p for p in report.problems), report.text()
    test = DATASETS.get("kitti")(out, "test")
    assert len(test) == 2  # the frame listed with depth 'None' is skipped
    assert test.depth_paths[0].parts[-6:-3] == ("gt_depth", DRIVES["test"], "proj_depth")
    with zipfile.ZipFile(download / "data_depth_annotated.zip") as zf:  # the val folder, merged
        member = "val/" + test.depth_paths[0].relative_to(out / "gt_depth").as_posix()
        assert zf.read(member) == test.depth_paths[0].read_bytes()
    with Image.open(test.image_paths[0]) as im:
        assert im.size == (24, 16)
    assert np.asarray(test.load_depth(0)).max() <= 60
    assert len(DATASETS.get("kitti")(out, "train")) == 3
    assert not list(out.rglob("velodyne_points")) and not list(out.rglob("image_00"))
    _prepare(download, out)
    assert capsys.readouterr().out.count("done before, skipped") == len(DRIVES) + 2
    assert snapshot(download) == before


@pytest.mark.parametrize("damage, message", [("absent", "lacks 1 of the 2 raw drive zips"),
                                             ("truncated", "truncated or damaged download")])
def test_bad_drive_zip_is_one_line_and_exit_2(download, tmp_path, capsys, damage, message):
    archive = download / f"{DRIVES['test']}.zip"
    archive.unlink() if damage == "absent" else truncate(archive)
    assert _prepare(download, tmp_path / "o") == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0] and DRIVES["test"] in err[0]
