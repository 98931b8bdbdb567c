"""Pascal VOC 2012 with the SBD augmentation, from the official archives to the layout the ``voc`` /
``voc12aug`` readers and mmseg read, as mmsegmentation's ``tools/dataset_converters/voc_aug.py``
makes it:

- ``VOCtrainval_11-May-2012.tar`` extracted as it is (``VOCdevkit/VOC2012/...``);
- every ``benchmark_RELEASE/dataset/cls/<id>.mat`` of SBD's ``benchmark.tgz`` converted to
  ``SegmentationClassAug/<id>.png``: ``GTcls.Segmentation`` as uint8 class indices (a grey PNG);
- ``ImageSets/Segmentation/trainaug.txt``: VOC train + SBD train + SBD val, minus VOC val (10,582
  ids on the full data); ``aug.txt``: SBD train + SBD val minus VOC train and val (mmseg's list,
  read with SegmentationClassAug beside train.txt with SegmentationClass).

Differences from the converter, named: the lists are sorted (it writes a set's order, which
varies from run to run); the VOC train masks that SBD does not cover are also written into
SegmentationClassAug (as class indices), so that every id of trainaug.txt has its mask there, as in
the widely shared SegmentationClassAug folder. The SBD archive is read member by member; its images
(the VOC images again) are not extracted.
"""
from __future__ import annotations

import io
import tarfile
from pathlib import Path

import numpy as np
from PIL import Image

from harness.data.prepare import Steps, require

VOC_TAR = "VOCtrainval_11-May-2012.tar"
SBD_TGZ = "benchmark.tgz"
SBD_DATASET = "benchmark_RELEASE/dataset/"
VOC_DIR = Path("VOCdevkit") / "VOC2012"


def sbd_mask(mat_bytes: bytes) -> np.ndarray:
    """The class-index mask of one SBD ``cls/<id>.mat`` (its ``GTcls.Segmentation``)."""
    from scipy.io import loadmat

    return loadmat(io.BytesIO(mat_bytes))["GTcls"][0]["Segmentation"][0].astype(np.uint8)


def _ids(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines() if line.strip()]


def _convert_sbd(sbd_tgz: Path, masks: Path) -> tuple[list[str], int]:
    """Write every SBD mask into ``masks``; (SBD train + val ids, masks written)."""
    masks.mkdir(parents=True)
    lists: dict[str, list[str]] = {}
    written = 0
    with tarfile.open(sbd_tgz) as tar:
        for member in tar:
            name = member.name
            if not member.isfile() or not name.startswith(SBD_DATASET):
                continue
            rel = name[len(SBD_DATASET):]
            if rel.startswith("cls/") and rel.endswith(".mat"):
                mask = sbd_mask(tar.extractfile(member).read())
                Image.fromarray(mask).save(masks / (Path(rel).stem + ".png"))
                written += 1
            elif rel in ("train.txt", "val.txt"):
                lists[rel] = _ids(tar.extractfile(member).read().decode())
    return lists.get("train.txt", []) + lists.get("val.txt", []), written


def prepare(steps: Steps) -> None:
    voc_tar, sbd_tgz = require(steps.download, VOC_TAR, SBD_TGZ)

    def voc(staging: Path) -> dict:
        with tarfile.open(voc_tar) as tar:
            tar.extractall(staging, filter="data")
        return {"images": sum(1 for _ in (staging / VOC_DIR / "JPEGImages").iterdir())}

    def sbd(staging: Path) -> dict:
        from harness.data.io import load_label_png

        sets = steps.out / VOC_DIR / "ImageSets" / "Segmentation"
        train, val = (_ids((sets / f"{s}.txt").read_text()) for s in ("train", "val"))
        masks = staging / VOC_DIR / "SegmentationClassAug"
        sbd_ids, written = _convert_sbd(sbd_tgz, masks)
        for stem in train:  # VOC train masks SBD lacks, as class indices
            if not (masks / f"{stem}.png").is_file():
                index = load_label_png(steps.out / VOC_DIR / "SegmentationClass" / f"{stem}.png")
                Image.fromarray(index).save(masks / f"{stem}.png")
        trainaug = sorted(set(train + sbd_ids) - set(val))
        aug = sorted(set(sbd_ids) - set(train + val))
        out_sets = staging / VOC_DIR / "ImageSets" / "Segmentation"
        out_sets.mkdir(parents=True)
        (out_sets / "trainaug.txt").write_text("".join(f"{s}\n" for s in trainaug))
        (out_sets / "aug.txt").write_text("".join(f"{s}\n" for s in aug))
        return {"SBD masks": written, "trainaug": len(trainaug), "aug": len(aug)}

    steps.run("voc", voc)
    steps.run("sbd", sbd)
