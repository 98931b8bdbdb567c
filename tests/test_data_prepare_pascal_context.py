"""`ssl-bench data prepare pascal_context` on a tiny download in the official formats
(tests/official_archives.py: the VOC 2010 archive and a PASCAL in Detail JSON), as mmseg's
pascal_context.py converts it: class masks mapped to 0..59 by rank among the kept ids, the train /
val lists, `data check` counting the layout; a pixel of a category outside the 60 is refused."""
from __future__ import annotations

import json

import numpy as np
from PIL import Image

from harness.cli import main
from harness.data.check import check_root
from official_archives import snapshot, write_pascal_context


def test_round_trip(tmp_path, capsys):
    download = tmp_path / "download"
    download.mkdir()
    written = write_pascal_context(download)
    before = snapshot(download)
    out = tmp_path / "context"
    main(["data", "prepare", "pascal_context", "--from", str(download), "--out", str(out)])
    assert "context: done (train 2, val 1)" in capsys.readouterr().out
    for key in ("pascal_context", "pascal_context:59"):
        report = check_root(key, out)
        assert report.problems and all("official" in p for p in report.problems), report.text()
    base = out / "VOCdevkit" / "VOC2010"
    lists = base / "ImageSets" / "SegmentationContext"
    assert lists.joinpath("train.txt").read_text().split() == ["2008_000002", "2008_000003"]
    assert lists.joinpath("val.txt").read_text().split() == ["2008_000007"]
    assert not (base / "SegmentationClassContext" / "2008_000008.png").exists()  # a test-phase image
    kept = np.array(written["kept"])
    for stem in ("2008_000002", "2008_000007"):
        converted = np.asarray(Image.open(base / "SegmentationClassContext" / f"{stem}.png"))
        truth = written["masks"][stem]
        assert np.array_equal(kept[converted], truth)  # rank among the kept ids, back to the category id
    main(["data", "prepare", "pascal_context", "--from", str(download), "--out", str(out)])
    assert capsys.readouterr().out.count("done before, skipped") == 2
    assert snapshot(download) == before


def test_a_category_outside_the_sixty_is_refused(tmp_path, capsys):
    download = tmp_path / "download"
    download.mkdir()
    write_pascal_context(download)
    doc = json.loads((download / "trainval_merged.json").read_text())
    doc["annos_segmentation"][0]["category_id"] = 1  # 'accordion'
    (download / "trainval_merged.json").write_text(json.dumps(doc))
    assert main(["data", "prepare", "pascal_context", "--from", str(download), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "outside the 60 kept ones" in err[0]
