"""Pascal VOC 2007 / 2012 detection boxes (data set keys ``voc2007`` and ``voc``, layout ``boxes``;
reader keys ``voc07`` and ``voc12``).

The layout torchvision's VOCDetection reads (LOST's datasets.py: ``datasets/VOC2007`` holding
``VOCdevkit/VOC2007``): ImageSets/Main/<split>.txt, JPEGImages/<id>.jpg and Annotations/<id>.xml.
Boxes as LOST's ``extract_gt_VOC`` makes them: every object (difficult and truncated ones too,
unless ``no_hard``), ``xmin - 1`` and ``ymin - 1`` (1-based inclusive pixel indices to 0-based
corners), ``xmax`` and ``ymax`` kept.
"""
from __future__ import annotations

import os
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np

from harness.data.boxes import LAYOUT_HINT, BoxDataset
from harness.data.io import files_stamp
from harness.errors import DataError
from harness.registry import register_dataset


def _voc_int(text: str | None, path: Path, tag: str) -> int:
    try:
        return int(text)
    except (TypeError, ValueError):
        raise DataError(f"annotation {path}: <{tag}> is {text!r}, not an integer pixel index; the file "
                        f"is corrupt or not a VOC annotation") from None


def parse_voc_objects(path: Path) -> list[dict]:
    """[{name, box (xmin, ymin, xmax, ymax) as written, difficult, truncated}] of a VOC xml."""
    try:
        root = ET.parse(path).getroot()
    except FileNotFoundError:
        raise DataError(f"annotation {path} does not exist; the data set is incomplete") from None
    except ET.ParseError as exc:
        raise DataError(f"annotation {path} is not valid XML ({exc}); replace it") from None
    out = []
    for obj in root.iter("object"):
        bb = obj.find("bndbox")
        if bb is None:
            raise DataError(f"annotation {path}: an <object> has no <bndbox>; the file is corrupt")
        box = tuple(_voc_int(bb.findtext(t), path, t) for t in ("xmin", "ymin", "xmax", "ymax"))
        out.append({"name": obj.findtext("name"), "box": box,
                    "difficult": (obj.findtext("difficult") or "0").strip() == "1",
                    "truncated": (obj.findtext("truncated") or "0").strip() == "1"})
    return out


def voc_gt_boxes(objects: list[dict], no_hard: bool = False) -> np.ndarray:
    """(n, 4) int64 boxes as LOST's extract_gt_VOC gives them: xmin - 1, ymin - 1, xmax, ymax;
    with ``no_hard`` the truncated and difficult objects are left out."""
    boxes = [(o["box"][0] - 1, o["box"][1] - 1, o["box"][2], o["box"][3]) for o in objects
             if not (no_hard and (o["difficult"] or o["truncated"]))]
    return np.asarray(boxes, dtype=np.int64).reshape(-1, 4)


class VOCBoxes(BoxDataset):
    YEAR = "2007"
    SPLITS = ("train", "val", "trainval", "test")

    def __init__(self, root: str | Path, split: str = "trainval", no_hard: bool = False):
        if split not in self.SPLITS:
            raise DataError(f"VOC{self.YEAR} split {split!r} is unknown; choose one of {', '.join(self.SPLITS)}")
        self.split, self.no_hard = split, no_hard
        self.root = self._resolve_root(Path(root))
        split_file = self.root / "ImageSets" / "Main" / f"{split}.txt"
        if not split_file.is_file():
            raise DataError(f"VOC{self.YEAR} split file {split_file} not found; the data set is incomplete")
        self.stems = [ln.strip() for ln in split_file.read_text().splitlines() if ln.strip()]
        if not self.stems:
            raise DataError(f"VOC{self.YEAR} split file {split_file} lists no images")
        for folder, ext in (("JPEGImages", ".jpg"), ("Annotations", ".xml")):
            present = {n[: -len(ext)] for n in os.listdir(self.root / folder) if n.endswith(ext)}
            missing = [s for s in self.stems if s not in present]
            if missing:
                raise DataError(f"{len(missing)} {ext} file(s) listed in {split_file} are missing in "
                                f"{self.root / folder}: {', '.join(missing[:5])}; the data set is incomplete")
        self.image_paths = [self.root / "JPEGImages" / f"{s}.jpg" for s in self.stems]
        self.annotation_paths = [self.root / "Annotations" / f"{s}.xml" for s in self.stems]

    def _resolve_root(self, root: Path) -> Path:
        name = f"VOC{self.YEAR}"
        if not root.exists():
            raise DataError(f"{name} root {root} does not exist; {LAYOUT_HINT}")
        for c in (root, root / name, root / "VOCdevkit" / name, root / name / "VOCdevkit" / name):
            if (c / "JPEGImages").is_dir() and (c / "Annotations").is_dir():
                return c
        raise DataError(f"no {name} detection layout under {root}: expected JPEGImages/ and Annotations/ "
                        f"in {root}, {root / name}, {root / 'VOCdevkit' / name} or "
                        f"{root / name / 'VOCdevkit' / name}; {LAYOUT_HINT}")

    def objects(self, i: int) -> list[dict]:
        return parse_voc_objects(self.annotation_paths[i])

    def boxes(self, i: int) -> np.ndarray:
        return voc_gt_boxes(self.objects(i), self.no_hard)

    def content_stamp(self) -> str:
        return files_stamp([*self.image_paths, *self.annotation_paths])


@register_dataset("voc07")
class VOC07Boxes(VOCBoxes):
    name = "voc07"
    YEAR = "2007"


@register_dataset("voc12")
class VOC12Boxes(VOCBoxes):
    name = "voc12"
    YEAR = "2012"
