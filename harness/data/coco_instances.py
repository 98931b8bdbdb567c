"""COCO instances (data set key ``coco``, layout ``instances``: COCO 2017's train2017 / val2017) in their
published layout, checked before a reader (mmdet's, the registered ``coco_instances``) takes them:

    <root>/annotations/instances_<split>.json   images, annotations, categories
    <root>/<split>/<file_name>                  every image the JSON lists

mmdet's ``CocoDataset`` reads the same files; it silently drops annotations whose image id no
JSON image has and fails late (in a data-loader worker) on a missing image file. Here each such
mismatch is one :class:`DataError` line naming the file, the first offending ids and the count.
The class names handed to mmdet are the JSON's categories in id order, as mmdet's COCO class
list is (80 classes for COCO 2017; SynthScenes' own otherwise). ``coco_instances`` serves one checked
split's images for ``ssl-bench data check coco:instances`` (counts, categories, ``--deep`` decoding).
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from harness.data.classification import LabelledImages
from harness.errors import DataError
from harness.registry import register_dataset

SHOWN = 3  # offending ids named in an error
LAYOUT_KEY = "coco:instances"  # the catalogue's name of this layout


@dataclass(frozen=True)
class CocoSplit:
    """One checked split: where its files are and what it holds."""

    root: Path
    split: str
    ann_file: Path
    image_dir: Path
    classes: tuple[str, ...]
    num_images: int
    num_annotations: int
    image_files: tuple[Path, ...] = ()


def _first(ids) -> str:
    ids = sorted(ids)
    more = f" (and {len(ids) - SHOWN} more)" if len(ids) > SHOWN else ""
    return ", ".join(str(i) for i in ids[:SHOWN]) + more


def _load(ann_file: Path) -> dict:
    if not ann_file.is_file():
        raise DataError(f"COCO: no annotation file {ann_file} (not found); expected "
                        f"<root>/annotations/instances_<split>.json beside the image folder <root>/<split>/")
    try:
        data = json.loads(ann_file.read_text())
    except (OSError, ValueError) as exc:
        raise DataError(f"COCO: {ann_file} is not readable JSON ({exc})") from exc
    missing = [k for k in ("images", "annotations", "categories") if not isinstance(data.get(k), list)]
    if missing:
        raise DataError(f"COCO: {ann_file} has no {', '.join(missing)} list; it is not a COCO instances file")
    return data


def check_split(root: str | Path, split: str) -> CocoSplit:
    """The split's files, checked: every annotation's image and category exist in the JSON, every
    listed image exists on disk, ids are unique. A DataError (one line) otherwise."""
    root = Path(root)
    ann_file = root / "annotations" / f"instances_{split}.json"
    image_dir = root / split
    data = _load(ann_file)
    image_ids = [im.get("id") for im in data["images"]]
    cat_ids = [c.get("id") for c in data["categories"]]
    for what, ids in (("image", image_ids), ("category", cat_ids)):
        dupes = {i for i in ids if ids.count(i) > 1} if len(set(ids)) != len(ids) else set()
        if dupes:
            raise DataError(f"COCO: {ann_file} lists {what} id(s) {_first(dupes)} more than once")
    if not cat_ids:
        raise DataError(f"COCO: {ann_file} declares no categories")
    known_images, known_cats = set(image_ids), set(cat_ids)
    stray_images = {a.get("image_id") for a in data["annotations"]} - known_images
    if stray_images:
        raise DataError(f"COCO: {ann_file} has annotations of image id(s) {_first(stray_images)} that its images "
                        f"list does not hold ({len(stray_images)} ids); the JSON does not match the images")
    stray_cats = {a.get("category_id") for a in data["annotations"]} - known_cats
    if stray_cats:
        raise DataError(f"COCO: {ann_file} has annotations of category id(s) {_first(stray_cats)} that its "
                        f"categories do not declare; the JSON's categories do not match its annotations")
    absent = {im["id"] for im in data["images"] if not (image_dir / str(im.get("file_name", ""))).is_file()}
    if absent:
        raise DataError(f"COCO: {len(absent)} image(s) of {ann_file} are missing from {image_dir} (image id(s) "
                        f"{_first(absent)}); the JSON does not match the images")
    classes = tuple(str(c.get("name")) for c in sorted(data["categories"], key=lambda c: c["id"]))
    files = tuple(image_dir / str(im["file_name"]) for im in data["images"])
    return CocoSplit(root, split, ann_file, image_dir, classes, len(image_ids), len(data["annotations"]), files)


def check_pair(root: str | Path, train_split: str, val_split: str) -> tuple[CocoSplit, CocoSplit]:
    """Both splits, checked, with the same categories (a model trains and is scored on one label space).
    The error ends with the `data check` command of this layout (the data set key alone names another)."""
    from harness.data.check import hint

    try:
        train, val = check_split(root, train_split), check_split(root, val_split)
    except DataError as exc:
        raise DataError(f"{exc}; {hint(LAYOUT_KEY, root)}") from None
    if train.classes != val.classes:
        raise DataError(f"COCO: {train.ann_file} and {val.ann_file} declare different categories "
                        f"({len(train.classes)} vs {len(val.classes)}); both splits need the same list; "
                        f"{hint(LAYOUT_KEY, root)}")
    return train, val


@register_dataset("coco_instances")
class CocoInstances(LabelledImages):
    """One checked split (``train2017``, ``val2017``, ...): its images in the JSON's order, ``classes``
    the categories in id order; the boxes and masks stay in the JSON for the detector's own reader.
    Every image's target is 0: a detection split has no image label."""

    name = "coco_instances"
    thread_safe = True

    def __init__(self, root: str | Path, split: str = "val2017"):
        self.root, self.split = Path(root), split
        checked = check_split(self.root, split)
        self.classes, self.image_paths = list(checked.classes), list(checked.image_files)
        self.num_annotations = checked.num_annotations
        self.targets = [0] * len(self.image_paths)
        self.samples = list(zip(self.image_paths, self.targets))
