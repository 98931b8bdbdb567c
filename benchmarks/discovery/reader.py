"""Box readers for object discovery: Pascal VOC 2007 / 2012 detection and COCO20k.

VOC: the layout torchvision's VOCDetection reads for LOST (datasets.py: ``datasets/VOC2007``
holding ``VOCdevkit/VOC2007``): ImageSets/Main/<split>.txt, JPEGImages/<id>.jpg and
Annotations/<id>.xml. Boxes as LOST's ``extract_gt_VOC`` makes them: every object (difficult and
truncated ones too, unless ``no_hard``), ``xmin - 1`` and ``ymin - 1`` (1-based inclusive pixel
indices to 0-based corners), ``xmax`` and ``ymax`` kept.

COCO20k: the 19,817 train2014 images of LOST's datasets/coco_20k_filenames.txt (shipped beside
this file, gzipped, with its source and sha256 in coco20k/SOURCE.md) with their
instances_train2014.json boxes, ``iscrowd`` ones removed, ``[x, y, x + w, y + h]`` rounded to
integers (``extract_gt_COCO``); images in increasing id order (torchvision's CocoDetection).
"""
from __future__ import annotations

import gzip
import hashlib
import json
import os
import xml.etree.ElementTree as ET
from functools import cached_property
from pathlib import Path

import numpy as np
from PIL import Image

from harness.config import fingerprint as _fingerprint
from harness.data.io import files_stamp, find_synth_meta, load_rgb
from harness.errors import DataError
from harness.registry import register_dataset

COCO20K_LIST = Path(__file__).parent / "coco20k" / "coco_20k_filenames.txt.gz"
COCO20K_SHA256 = "74637e9b4f93f2ebef9b1f664aff53edd1f41ef08dad97bd22ce8e455052b335"  # the uncompressed list
_HINT = ("point the data root at the official layout (docs/protocols/lost.md), or at the SynthScenes "
         "discovery set (a suite's {synth:lost}; benchmarks/discovery/synthetic.py generate(DIR))")


class BoxDataset:
    """Shared: ``stems``, ``image_paths``, ``load_image(i)``, ``boxes(i)`` -> (n, 4) int64
    (x0, y0, x1, y1), ``fingerprint()`` and ``content_stamp()``."""

    name = "boxes"
    root: Path
    split: str
    stems: list[str]
    image_paths: list[Path]

    def __len__(self) -> int:
        return len(self.stems)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(root={str(self.root)!r}, split={self.split!r}, n={len(self)})"

    def load_image(self, i: int) -> Image.Image:
        return load_rgb(self.image_paths[i])

    @property
    def is_synthetic(self) -> bool:
        return find_synth_meta(self.root, levels=2) is not None

    def content_stamp(self) -> str:
        return files_stamp(self.image_paths)

    def fingerprint(self) -> str:
        return _fingerprint({"dataset": self.name, "split": self.split,
                             "images": [p.relative_to(self.root).as_posix() for p in self.image_paths]})


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
            raise DataError(f"{name} root {root} does not exist; {_HINT}")
        for c in (root, root / name, root / "VOCdevkit" / name, root / name / "VOCdevkit" / name):
            if (c / "JPEGImages").is_dir() and (c / "Annotations").is_dir():
                return c
        raise DataError(f"no {name} detection layout under {root}: expected JPEGImages/ and Annotations/ "
                        f"in {root}, {root / name}, {root / 'VOCdevkit' / name} or "
                        f"{root / name / 'VOCdevkit' / name}; {_HINT}")

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
            raise DataError(f"COCO20k root {self.root} does not exist; {_HINT}")
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
