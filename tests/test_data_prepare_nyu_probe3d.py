"""`ssl-bench data prepare nyu:probe3d` on a tiny download in the official formats
(tests/official_archives.py): the pickle Probe3D's create_nyu_pkl.py writes and GeoNet's export in
one folder, read by the ``nyu_probe3d`` reader frame for frame, idempotent, the download untouched."""
from __future__ import annotations

import numpy as np
import pytest

from harness.cli import main
from harness.data.check import check_root
from harness.registry import DATASETS
from official_archives import snapshot, write_nyu_probe3d


def test_round_trip(tmp_path, capsys):
    pytest.importorskip("h5py")
    download = tmp_path / "download"
    written = write_nyu_probe3d(download)
    before = snapshot(download)
    out = tmp_path / "nyu"
    main(["data", "prepare", "nyu:probe3d", "--from", str(download), "--out", str(out)])
    log = capsys.readouterr().out
    assert "probe3d-labelled: done (frames 6, train 3, test 3)" in log
    assert "probe3d-geonet: done (GeoNet files 4)" in log
    report = check_root("nyu:probe3d", out)
    assert report.problems and all("official" in p for p in report.problems), report.text()
    test = DATASETS.get("nyu_probe3d")(out, "test")
    assert test.items == [i - 1 for i in written["test"]]
    frame = written["test"][1] - 1
    assert np.array_equal(test.load_image(1), np.transpose(written["images"][frame], (2, 1, 0)))
    assert np.array_equal(test.load_depth(1), written["depths"][frame].T)
    assert np.array_equal(test.load_normals(1), np.transpose(written["normals"][frame], (2, 0, 1)))
    train = DATASETS.get("nyu_probe3d")(out, "trainval")
    assert sorted(p.name for p in train.paths) == sorted(written["geonet"])
    main(["data", "prepare", "nyu:probe3d", "--from", str(download), "--out", str(out)])
    assert capsys.readouterr().out.count("done before, skipped") == 2
    assert snapshot(download) == before


def test_one_geonet_half_is_refused(tmp_path, capsys):
    pytest.importorskip("h5py")
    download = tmp_path / "download"
    write_nyu_probe3d(download)
    (download / "data2.zip").unlink()
    assert main(["data", "prepare", "nyu:probe3d", "--from", str(download), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "lacks data2.zip" in err[0]
