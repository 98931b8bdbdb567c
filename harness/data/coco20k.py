"""COCO20k (data set key ``coco``, layout ``coco20k``; reader key ``coco20k``): the 19,817
train2014 images of LOST's datasets/coco_20k_filenames.txt (shipped beside this file, gzipped, with
its source and sha256 in coco20k/SOURCE.md) with their instances_train2014.json boxes, ``iscrowd``
ones removed, ``[x, y, x + w, y + h]`` rounded to integers (``extract_gt_COCO``); images in
increasing id order (torchvision's CocoDetection).
"""
from __future__ import annotations

import gzip
import hashlib
import json
from functools import cached_property
from pathlib import Path

import numpy as np

from harness.data.boxes import LAYOUT_HINT, BoxDataset
from harness.errors import DataError
from harness.registry import register_dataset

COCO20K_LIST = Path(__file__).parent / "coco20k" / "coco_20k_filenames.txt.gz"
COCO20K_SHA256 = "74637e9b4f93f2ebef9b1f664aff53edd1f41ef08dad97bd22ce8e455052b335"  # the uncompressed list


def read_coco20k_list(path: Path = COCO20K_LIST) -> list[str]:
    """The 19,817 'train2014/COCO_train2014_<id>.jpg' lines of LOST's list, checked by sha256."""
    raw = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
    if path == COCO20K_LIST and hashlib.sha256(raw).hexdigest() != COCO20K_SHA256:
        raise DataError(f"{path} does not have the sha256 of LOST's coco_20k_filenames.txt; reinstall ssl-bench")
    return [ln for ln in raw.decode().splitlines() if ln.strip()]


@register_dataset("coco20k")
class COCO20k(BoxDataset):
    """``root`` holds train2014/ (or images/train2014/) and annotations/instances_train2014.json."""

    name = "coco20k"

    def __init__(self, root: str | Path, split: str = "train", list_file: str | Path | None = None):
        if split != "train":
            raise DataError(f"COCO20k is a subset of COCO train2014: split must be 'train', found {split!r}")
        self.split, self.root = split, Path(root)
        if not self.root.exists():
            raise DataError(f"COCO20k root {self.root} does not exist; {LAYOUT_HINT}")
        self.annotation_file = self.root / "annotations" / "instances_train2014.json"
        if not self.annotation_file.is_file():
            raise DataError(f"COCO annotations {self.annotation_file} not found: COCO20k needs the 2014 "
                            f"train instances (cocodataset.org, annotations_trainval2014.zip)")
        names = read_coco20k_list(Path(list_file) if list_file else COCO20K_LIST)
        ids = sorted(int(n.rsplit("_", 1)[-1].split(".")[0]) for n in names)  # CocoDetection's order
        base = next((b for b in (self.root, self.root / "images") if (b / "train2014").is_dir()), None)
        if base is None:
            raise DataError(f"no train2014/ image folder in {self.root} or {self.root / 'images'}")
        self.ids = ids
        self.stems = [str(i) for i in ids]  # LOST names COCO images by their id
        self.image_paths = [base / "train2014" / f"COCO_train2014_{i:012d}.jpg" for i in ids]
        missing = [p.name for p in self.image_paths if not p.is_file()]
        if missing:
            raise DataError(f"{len(missing)} COCO20k image(s) missing in {base / 'train2014'}: "
                            f"{', '.join(missing[:5])}; the data set is incomplete")

    @cached_property
    def _annotations(self) -> dict[int, list[dict]]:
        try:
            data = json.loads(self.annotation_file.read_text())
        except ValueError as exc:
            raise DataError(f"{self.annotation_file} is not valid JSON ({exc})") from None
        wanted = set(self.ids)
        by_image: dict[int, list[dict]] = {i: [] for i in self.ids}
        for a in data.get("annotations", []):
            if a.get("image_id") in wanted:
                by_image[a["image_id"]].append(a)
        return by_image

    def boxes(self, i: int) -> np.ndarray:
        """Non-crowd boxes as LOST's extract_gt_COCO rounds them (Python's round: half to even)."""
        out = []
        for a in self._annotations[self.ids[i]]:
            if a.get("iscrowd") == 1:
                continue
            x, y, w, h = a["bbox"]
            out.append([int(round(v)) for v in (x, y, x + w, y + h)])
        return np.asarray(out, dtype=np.int64).reshape(-1, 4)
