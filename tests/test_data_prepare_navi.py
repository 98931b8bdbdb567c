"""`ssl-bench data prepare navi` on a tiny navi_v1 download (tests/official_navi.py), packed or
extracted: Probe3D's downsampled files beside the release's, read by the ``navi`` and
``navi:probe3d`` readers and passing `data check`, idempotent, resumable, the download untouched; a
collection without annotations.json or a truncated image is one error line and exit 2."""
from __future__ import annotations

import contextlib
import io

import numpy as np
import pytest
from PIL import Image

from harness.cli import main
from harness.data import prepare_navi
from harness.registry import DATASETS
from official_archives import snapshot
from official_navi import COLLECTIONS, OBJECTS, ROTATED, VIEWS, truncate, write_navi_download


def _prepare(download, out) -> int:
    return main(["data", "prepare", "navi", "--from", str(download), "--out", str(out)])


def _downsampled(root) -> dict[str, str]:
    return {k: v for k, v in snapshot(root).items() if "/downsampled_" in k}


@pytest.fixture
def packed(tmp_path):
    write_navi_download(tmp_path / "download", packed=True)
    return tmp_path / "download"


@pytest.fixture(scope="module")
def from_archive(tmp_path_factory):
    """One preparation from the packed download, read by the tests that only look at its files:
    (download, its snapshot before, the prepared folder, the command's exit status and log)."""
    folder = tmp_path_factory.mktemp("navi")
    download = write_navi_download(folder / "download", packed=True).parent
    before = snapshot(download)
    log = io.StringIO()
    with contextlib.redirect_stdout(log):
        rc = _prepare(download, folder / "navi")
    return download, before, folder / "navi", rc, log.getvalue()


def test_round_trip_from_the_archive(from_archive, capsys):
    packed, before, out, rc, log = from_archive
    assert rc == 0
    assert "extract: done" in log and f"navi-{OBJECTS[0]}: done (images 6, depth 6)" in log
    for key in ("navi", "navi:probe3d"):
        assert main(["data", "check", key, "--data-root", str(out)]) == 0, capsys.readouterr().out
    assert len(DATASETS.get("navi_probe3d")(out, "test")) == 2  # 2 x 3 wild_set views, every 4th
    assert len(DATASETS.get("navi")(out, "test")) > 0
    assert len(_downsampled(out)) == 2 * len(OBJECTS) * len(COLLECTIONS) * VIEWS
    assert _prepare(packed, out) == 0
    assert capsys.readouterr().out.count("done before, skipped") == 1 + len(OBJECTS)
    assert snapshot(packed) == before


def test_resize_as_probe3d(from_archive):
    out = from_archive[2]
    folder = out / OBJECTS[0] / COLLECTIONS[0]
    with Image.open(folder / "images" / "000.jpg") as im:
        original = im.convert("RGB")
    with Image.open(folder / "images" / "downsampled_000.jpg") as im:
        assert im.size == (1365, 1024)  # int(32 * 1024 / 24), the short side 1024
        # bilinear (PIL's filter 2), JPEG quality 75: close to the bilinear resize, far from nearest
        ours = np.asarray(im.convert("RGB"), dtype=float)
        bilinear = np.asarray(original.resize(im.size, Image.Resampling.BILINEAR), dtype=float)
        nearest = np.asarray(original.resize(im.size, Image.Resampling.NEAREST), dtype=float)
        assert np.abs(ours - bilinear).mean() < np.abs(ours - nearest).mean()
    with Image.open(out / ROTATED.replace("/001.jpg", "/downsampled_001.jpg")) as im:
        assert im.size == (1024, 1365)  # turned upright by its EXIF orientation first
    with Image.open(folder / "depth" / "000.png") as im:
        raw = np.asarray(im)
    with Image.open(folder / "depth" / "downsampled_000.png") as im:
        down = np.asarray(im)
    assert down.shape == (1024, 1365) and down.dtype == raw.dtype == np.uint16
    assert set(np.unique(down)) <= set(np.unique(raw))  # nearest: no blended disparity
    assert not list(out.rglob("masks/downsampled_*"))


def test_extracted_tree_gives_the_same_files(from_archive, tmp_path, capsys):
    tree = write_navi_download(tmp_path / "extracted", packed=False)
    before = snapshot(tree)
    from_tree = tmp_path / "b"
    assert _prepare(tmp_path / "extracted", from_tree) == 0
    assert "extract:" not in capsys.readouterr().out
    assert snapshot(tree) == before
    shared = {k: v for k, v in snapshot(from_archive[2]).items() if "3d_scan" not in k and k != ".prepared.json"}
    assert {k: v for k, v in snapshot(from_tree).items() if k != ".prepared.json"} == shared
    assert main(["data", "check", "navi", "--data-root", str(from_tree)]) == 0


def test_interrupted_run_resumes_at_its_object(packed, tmp_path, monkeypatch, capsys):
    out = tmp_path / "navi"
    real = prepare_navi.downsample

    def stop_at_second_object(src, dst, resample):
        if OBJECTS[0] in src.parts:
            raise KeyboardInterrupt
        real(src, dst, resample)

    monkeypatch.setattr(prepare_navi, "downsample", stop_at_second_object)
    assert _prepare(packed, out) != 0
    assert not list(out.glob(".staging-*"))
    monkeypatch.setattr(prepare_navi, "downsample", real)
    assert _prepare(packed, out) == 0
    log = capsys.readouterr().out
    assert f"navi-{OBJECTS[1]}: done before, skipped" in log and f"navi-{OBJECTS[0]}: done" in log
    assert main(["data", "check", "navi:probe3d", "--data-root", str(out)]) == 0


@pytest.mark.parametrize("damage, message", [
    ("annotations.json", "lacks annotations.json"),
    ("images/002.jpg", "truncated or damaged download"),
])
def test_bad_download_is_one_line_and_exit_2(tmp_path, capsys, damage, message):
    tree = write_navi_download(tmp_path / "download", packed=False)
    target = tree / OBJECTS[1] / COLLECTIONS[1] / damage
    target.unlink() if damage == "annotations.json" else truncate(target)
    assert _prepare(tmp_path / "download", tmp_path / "o") == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0] and OBJECTS[1] in err[0]
