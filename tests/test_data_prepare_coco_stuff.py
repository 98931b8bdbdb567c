"""`ssl-bench data prepare coco:stuff164k` on a tiny download in the official packing
(tests/official_archives.py), as mmseg's coco_stuff164k.py converts it: the train-id table agrees
with mmseg's own COCOStuffDataset class list on COCO's category names, the masks are mapped, `data
check` counts the layout it cannot read through a harness reader, and a root with the raw
stuffthingmaps (not converted) is named."""
from __future__ import annotations

import numpy as np
from PIL import Image

from harness.cli import main
from harness.data.check import check_root
from harness.data.prepare_coco_stuff import train_id_table
from official_archives import snapshot, write_coco_stuff

# COCO category ids (1-based, cocodataset.org) and their names
COCO_NAMES = {1: "person", 13: "stop sign", 27: "backpack", 31: "handbag", 46: "wine glass", 67: "dining table",
              70: "toilet", 84: "book", 90: "toothbrush", 92: "banner", 182: "wood"}


def test_train_ids_are_mmsegs_class_order():
    from mmseg.datasets import COCOStuffDataset

    classes, table = COCOStuffDataset.METAINFO["classes"], train_id_table()
    assert {cat: classes[table[cat - 1]] for cat in COCO_NAMES} == COCO_NAMES
    assert sorted(set(table[:182].tolist())) == list(range(171)) and table[255] == 255


def test_round_trip(tmp_path, capsys):
    download = tmp_path / "download"
    masks = write_coco_stuff(download)
    before = snapshot(download)
    out = tmp_path / "coco"
    assert main(["data", "prepare", "coco:stuff164k", "--from", str(download), "--out", str(out)]) == 2
    text = capsys.readouterr().out
    assert "masks: done (train2017 3, val2017 2)" in text
    assert "split val2017: 2 images, 2 masks (official 5,000)" in text
    report = check_root("coco", out)
    assert report.problems and all("official" in p for p in report.problems), report.text()
    table = train_id_table()
    for name, mask in masks.items():
        converted = np.asarray(Image.open(out / "annotations" / f"{name}_labelTrainIds.png"))
        assert np.array_equal(converted, table[mask])
        assert (out / "images" / f"{name}.jpg").is_file()
    main(["data", "prepare", "coco:stuff164k", "--from", str(download), "--out", str(out)])
    assert capsys.readouterr().out.count("done before, skipped") == 2
    assert snapshot(download) == before


def test_unconverted_masks_and_a_missing_one_are_named(tmp_path):
    download = tmp_path / "download"
    masks = write_coco_stuff(download)
    out = tmp_path / "coco"
    main(["data", "prepare", "coco:stuff164k", "--from", str(download), "--out", str(out)])
    for name, mask in masks.items():  # the raw stuffthingmaps under the converted names
        raw = mask.copy()
        raw[0, 0] = 181
        Image.fromarray(raw).save(out / "annotations" / f"{name}_labelTrainIds.png")
    gone = sorted(masks)[0]
    (out / "annotations" / f"{gone}_labelTrainIds.png").unlink()
    text = check_root("coco:stuff164k", out).text()
    assert "1 images without a _labelTrainIds.png mask, e.g. " + gone.split("/")[1] in text
    assert "are not train ids (0..170, 255)" in text
