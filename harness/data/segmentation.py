"""Semantic segmentation readers: Pascal VOC 2012 and ADE20K (ADEChallengeData2016).

The same classes read the real datasets and SynthScenes' copies of their layouts; the
only SynthScenes-specific step is taking class names from its meta.json. Everything that
can be checked cheaply (root, split file, image/mask pairs) is checked at construction,
so a broken dataset fails before hours of feature extraction, with a message that says
which path was expected.
"""
from __future__ import annotations

import copy
import os
from pathlib import Path
from typing import ClassVar, Sequence

import numpy as np
from PIL import Image

from harness.config import fingerprint as _fingerprint
from harness.data.io import IGNORE_INDEX, files_stamp, find_synth_meta, image_size, load_label_png, load_rgb
from harness.errors import DataError
from harness.registry import register_dataset

VOC_CLASSES = (
    "background", "aeroplane", "bicycle", "bird", "boat", "bottle", "bus", "car", "cat",
    "chair", "cow", "diningtable", "dog", "horse", "motorbike", "person", "pottedplant",
    "sheep", "sofa", "train", "tvmonitor",
)

# ADE20K SceneParsing 150 classes, in label order 1..150 (as listed by mmsegmentation).
ADE20K_CLASSES = (
    "wall", "building", "sky", "floor", "tree", "ceiling", "road", "bed", "windowpane", "grass",
    "cabinet", "sidewalk", "person", "earth", "door", "table", "mountain", "plant", "curtain",
    "chair", "car", "water", "painting", "sofa", "shelf", "house", "sea", "mirror", "rug",
    "field", "armchair", "seat", "fence", "desk", "rock", "wardrobe", "lamp", "bathtub",
    "railing", "cushion", "base", "box", "column", "signboard", "chest of drawers", "counter",
    "sand", "sink", "skyscraper", "fireplace", "refrigerator", "grandstand", "path", "stairs",
    "runway", "case", "pool table", "pillow", "screen door", "stairway", "river", "bridge",
    "bookcase", "blind", "coffee table", "toilet", "flower", "book", "hill", "bench",
    "countertop", "stove", "palm", "kitchen island", "computer", "swivel chair", "boat", "bar",
    "arcade machine", "hovel", "bus", "towel", "light", "truck", "tower", "chandelier",
    "awning", "streetlight", "booth", "television receiver", "airplane", "dirt track",
    "apparel", "pole", "land", "bannister", "escalator", "ottoman", "bottle", "buffet",
    "poster", "stage", "van", "ship", "fountain", "conveyer belt", "canopy", "washer",
    "plaything", "swimming pool", "stool", "barrel", "basket", "waterfall", "tent", "bag",
    "minibike", "cradle", "oven", "ball", "food", "step", "tank", "trade name", "microwave",
    "pot", "animal", "bicycle", "lake", "dishwasher", "screen", "blanket", "sculpture", "hood",
    "sconce", "vase", "traffic light", "tray", "ashcan", "fan", "pier", "crt screen", "plate",
    "monitor", "bulletin board", "shower", "radiator", "glass", "clock", "flag",
)
assert len(VOC_CLASSES) == 21 and len(ADE20K_CLASSES) == 150

_SYNTH_HINT = ("point the data root at a folder that holds it, or generate SynthScenes with "
               "`ssl-bench data synth --out DIR` and use DIR as the data root")


def _list_names(folder: Path, suffix: str) -> set[str]:
    """Stems of the files in ``folder`` with ``suffix`` (one listdir instead of a stat per file)."""
    try:
        return {n[: -len(suffix)] for n in os.listdir(folder) if n.endswith(suffix)}
    except FileNotFoundError:
        return set()


def _missing_msg(what: str, missing: Sequence[str], where: Path) -> str:
    shown = ", ".join(missing[:10]) + (f", ... ({len(missing)} in all)" if len(missing) > 10 else "")
    return f"{len(missing)} {what} missing in {where}: {shown}"


class SegmentationDataset:
    """Shared behaviour: lists of (stem, image, mask), validated loading, subset, fingerprint.

    Subclasses set ``name``, ``num_classes``, ``class_names``, ``root`` (the resolved
    dataset folder), ``split`` and the three lists, and may override ``_convert_mask``.
    """

    name: str = "segmentation"
    ignore_index: int = IGNORE_INDEX
    num_classes: int
    class_names: tuple[str, ...]
    root: Path
    split: str
    stems: list[str]
    image_paths: list[Path]
    mask_paths: list[Path]
    is_synthetic: bool = False

    def __len__(self) -> int:
        return len(self.stems)

    def __getitem__(self, i: int) -> tuple[Image.Image, np.ndarray]:
        return self.load_image(i), self.load_mask(i)

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(root={str(self.root)!r}, split={self.split!r}, "
                f"n={len(self)}, num_classes={self.num_classes})")

    def load_image(self, i: int) -> Image.Image:
        return load_rgb(self.image_paths[i], refuse_rotated=True)

    def load_mask(self, i: int) -> np.ndarray:
        """(H, W) uint8 labels in 0..num_classes-1, or ``ignore_index``; the size of its image
        (a label map of another size cannot be aligned with it: resizing both to one square, as
        some protocols do, would hide the mismatch)."""
        path = self.mask_paths[i]
        mask = self._convert_mask(load_label_png(path), path)
        w, h = image_size(self.image_paths[i])
        if mask.shape != (h, w):
            raise DataError(f"mask {path} is {mask.shape[1]}x{mask.shape[0]} (width x height) but its image "
                            f"{self.image_paths[i]} is {w}x{h}; a label map must have its image's size "
                            f"(replace one of them)")
        bad = (mask >= self.num_classes) & (mask != self.ignore_index)
        if bad.any():
            raise DataError(
                f"mask {path} has label {int(mask[bad].max())} but {self.name} has num_classes="
                f"{self.num_classes} (valid: 0..{self.num_classes - 1} and {self.ignore_index} = "
                f"ignore); the file is corrupt or belongs to another label set")
        return mask

    def _convert_mask(self, raw: np.ndarray, path: Path) -> np.ndarray:
        return raw

    def subset(self, stems: Sequence[str]):
        """The same dataset restricted to ``stems``, in the order given (for fixed subsets)."""
        index = {s: i for i, s in enumerate(self.stems)}
        stems = list(stems)
        missing = [s for s in stems if s not in index]
        if missing:
            raise DataError(_missing_msg("stem(s) of the subset are", missing,
                                         Path(f"{self.root} split {self.split!r}"))
                            + "; the subset file does not belong to this dataset/split")
        out = copy.copy(self)
        order = [index[s] for s in stems]
        out.stems = [self.stems[i] for i in order]
        out.image_paths = [self.image_paths[i] for i in order]
        out.mask_paths = [self.mask_paths[i] for i in order]
        return out

    def content_stamp(self) -> str:
        """Sizes and mtimes of the files (see harness.data.io.files_stamp)."""
        return files_stamp([*self.image_paths, *self.mask_paths])

    def fingerprint(self) -> str:
        """Hash of the root-relative file list + split: equal across machines and data roots."""
        return _fingerprint({
            "dataset": self.name, "split": self.split, "num_classes": self.num_classes,
            "images": [p.relative_to(self.root).as_posix() for p in self.image_paths],
            "masks": [p.relative_to(self.root).as_posix() for p in self.mask_paths],
        })

    def _set_classes(self, real: tuple[str, ...], layout_key: str) -> None:
        meta = find_synth_meta(self.root, levels=2)
        names = meta.get("classes", {}).get(layout_key) if meta else None
        if names:
            self.is_synthetic = True
            self.class_names = tuple(names)
        else:
            self.class_names = real
        self.num_classes = len(self.class_names)

    def _check_pairs(self, image_dir: Path, image_ext: str, mask_dir: Path) -> None:
        images = _list_names(image_dir, image_ext)
        masks = _list_names(mask_dir, ".png")
        no_image = [s for s in self.stems if s not in images]
        if no_image:
            raise DataError(_missing_msg(f"image(s) {image_ext} listed for split {self.split!r} are",
                                         no_image, image_dir) + "; the dataset is incomplete")
        no_mask = [s for s in self.stems if s not in masks]
        if no_mask:
            raise DataError(_missing_msg(f"mask(s) .png for split {self.split!r} are", no_mask, mask_dir)
                            + "; the dataset is incomplete")


@register_dataset("voc")
@register_dataset("voc12aug")  # mmseg's name for the train + SBD-aug training set
class VOCSegmentation(SegmentationDataset):
    """Pascal VOC 2012 segmentation: ``root`` is VOC2012 itself, or holds VOC2012 or
    VOCdevkit/VOC2012. Splits: train, val (SegmentationClass, palette indices) and trainaug
    (SegmentationClassAug + ImageSets/Segmentation/trainaug.txt or mmseg's aug.txt)."""

    name = "voc"
    SPLITS = ("train", "val", "trainaug")

    def __init__(self, root: str | Path, split: str = "train"):
        if split not in self.SPLITS:
            raise DataError(f"VOC split {split!r} is unknown; choose one of {', '.join(self.SPLITS)}")
        self.split = split
        self.root = self._resolve_root(Path(root))
        sets = self.root / "ImageSets" / "Segmentation"
        if split == "trainaug":
            candidates = [sets / "trainaug.txt", sets / "aug.txt"]
            mask_dir = self.root / "SegmentationClassAug"
        else:
            candidates = [sets / f"{split}.txt"]
            mask_dir = self.root / "SegmentationClass"
        split_file = next((c for c in candidates if c.is_file()), None)
        if split_file is None:
            extra = (" (trainaug needs the SBD-augmented masks: SegmentationClassAug/ and its "
                     "list, e.g. from mmsegmentation's tools/dataset_converters/voc_aug.py)"
                     if split == "trainaug" else "")
            raise DataError(f"VOC split file not found: expected {' or '.join(map(str, candidates))}"
                            f"{extra}")
        if not mask_dir.is_dir():
            raise DataError(f"VOC mask folder {mask_dir} not found (needed for split {split!r})")
        self.stems = [ln.strip() for ln in split_file.read_text().splitlines() if ln.strip()]
        if not self.stems:
            raise DataError(f"VOC split file {split_file} lists no images")
        image_dir = self.root / "JPEGImages"
        self._check_pairs(image_dir, ".jpg", mask_dir)
        self.image_paths = [image_dir / f"{s}.jpg" for s in self.stems]
        self.mask_paths = [mask_dir / f"{s}.png" for s in self.stems]
        self._set_classes(VOC_CLASSES, "voc")

    @staticmethod
    def _resolve_root(root: Path) -> Path:
        if not root.exists():
            raise DataError(f"VOC root {root} does not exist; {_SYNTH_HINT}")
        for candidate in (root, root / "VOC2012", root / "VOCdevkit" / "VOC2012"):
            if (candidate / "JPEGImages").is_dir():
                return candidate
        raise DataError(f"no Pascal VOC 2012 layout under {root}: expected JPEGImages/ in {root}, "
                        f"{root / 'VOC2012'} or {root / 'VOCdevkit' / 'VOC2012'}; {_SYNTH_HINT}")


@register_dataset("ade20k")
class ADE20KSegmentation(SegmentationDataset):
    """ADE20K SceneParsing (ADEChallengeData2016): ``root`` is that folder or holds it.

    Labels use mmseg's ``reduce_zero_label``: 0 ("other") -> 255 (ignored), k -> k - 1,
    so class indices run 0..149 (0..15 for SynthScenes)."""

    name = "ade20k"
    _ALIASES = {"training": "training", "train": "training", "validation": "validation",
                "val": "validation"}

    def __init__(self, root: str | Path, split: str = "training"):
        if split not in self._ALIASES:
            raise DataError(f"ADE20K split {split!r} is unknown; choose training/validation "
                            f"(or train/val)")
        self.split = self._ALIASES[split]
        self.root = self._resolve_root(Path(root))
        image_dir = self.root / "images" / self.split
        mask_dir = self.root / "annotations" / self.split
        for d in (image_dir, mask_dir):
            if not d.is_dir():
                raise DataError(f"ADE20K folder {d} not found (needed for split {self.split!r}); "
                                f"the dataset is incomplete")
        # ADE20K has no split files: the images present define the split.
        self.stems = sorted(_list_names(image_dir, ".jpg"))
        if not self.stems:
            raise DataError(f"ADE20K folder {image_dir} holds no .jpg images")
        self._check_pairs(image_dir, ".jpg", mask_dir)
        self.image_paths = [image_dir / f"{s}.jpg" for s in self.stems]
        self.mask_paths = [mask_dir / f"{s}.png" for s in self.stems]
        self._set_classes(ADE20K_CLASSES, "ade20k")
        # reduce_zero_label as a lookup table (raw values are validated first).
        lut = np.arange(-1, 255, dtype=np.int64)
        lut[0] = IGNORE_INDEX
        self._lut = lut.astype(np.uint8)

    def _convert_mask(self, raw: np.ndarray, path: Path) -> np.ndarray:
        bad = raw > self.num_classes
        if bad.any():
            raise DataError(
                f"mask {path} has raw label {int(raw[bad].max())} but ADE20K annotations hold "
                f"0 (other) .. {self.num_classes} (num_classes={self.num_classes}); the file is "
                f"corrupt or belongs to another label set")
        return self._lut[raw]

    @staticmethod
    def _resolve_root(root: Path) -> Path:
        if not root.exists():
            raise DataError(f"ADE20K root {root} does not exist; {_SYNTH_HINT}")
        for candidate in (root, root / "ADEChallengeData2016"):
            if (candidate / "images").is_dir() and (candidate / "annotations").is_dir():
                return candidate
        raise DataError(f"no ADE20K layout under {root}: expected images/ and annotations/ in "
                        f"{root} or {root / 'ADEChallengeData2016'}; {_SYNTH_HINT}")


class ReadByMmsegOnly:
    """A data set only mmsegmentation reads, inside the segmentation protocols (how, in
    benchmarks/segmentation/layouts.py): registered by name; the harness has no reader for it."""

    harness_reader: ClassVar[bool] = False
    name: ClassVar[str]

    def __init__(self, root: str | Path, split: str = "val"):
        raise DataError(f"{self.name} is read by mmsegmentation inside the segmentation protocols; "
                        f"the harness has no reader for it")


@register_dataset("pascal_context")
class PascalContext(ReadByMmsegOnly):
    name = "pascal_context"  # 60 classes, background included


@register_dataset("pascal_context_59")
class PascalContext59(ReadByMmsegOnly):
    name = "pascal_context_59"  # background ignored


@register_dataset("coco_stuff164k")
class CocoStuff164k(ReadByMmsegOnly):
    name = "coco_stuff164k"
