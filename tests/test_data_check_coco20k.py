"""`ssl-bench data check coco:coco20k` on COCO 2014 train in its official layout
(tests/official_archives.py) holding the 19,817 images of LOST's list: ready, the boxes read as LOST
reads them; an image absent or the annotation file absent is named, exit 2."""
from __future__ import annotations

import numpy as np
import pytest

from harness.cli import main
from official_archives import write_coco_train2014


@pytest.fixture(scope="module")
def coco(tmp_path_factory):
    from harness.data.coco20k import read_coco20k_list

    ids = sorted(int(n.rsplit("_", 1)[-1].split(".")[0]) for n in read_coco20k_list())
    root = tmp_path_factory.mktemp("coco")
    return root, ids, write_coco_train2014(root, ids)


def test_official_layout_is_ready(coco, capsys):
    from harness.registry import DATASETS

    root, ids, boxes = coco
    assert main(["data", "check", "coco:coco20k", "--data-root", str(root)]) == 0
    assert "split train: 19,817 images (ok)" in capsys.readouterr().out
    reader = DATASETS.get("coco20k")(root, "train")
    first = ids[0]
    expected = [[int(round(v)) for v in (x, y, x + w, y + h)] for x, y, w, h in boxes[first][1:]]  # crowd dropped
    assert np.array_equal(reader.boxes(0), np.asarray(expected))


def test_an_absent_image_and_absent_annotations_are_named(coco, tmp_path, capsys):
    import os
    import shutil

    root, ids, _ = coco
    broken = tmp_path / "coco"
    shutil.copytree(root, broken, copy_function=os.link)
    gone = broken / "train2014" / f"COCO_train2014_{ids[5]:012d}.jpg"
    gone.unlink()
    assert main(["data", "check", "coco:coco20k", "--data-root", str(broken)]) == 2
    out = capsys.readouterr().out
    assert "split train: BROKEN" in out and gone.name in out
    (broken / "annotations" / "instances_train2014.json").unlink()
    assert main(["data", "check", "coco:coco20k", "--data-root", str(broken)]) == 2
    assert "split train: MISSING" in capsys.readouterr().out
