"""The segmentation data sets as mmsegmentation reads them, by registered data set name: its
dataset class, label convention and folder layout (``LAYOUTS``, other accepted names in ``ALIASES``),
and a root's folders (the official layouts or SynthScenes') turned into mmseg dataset dicts, without
pipelines, each folder and split list checked before a run starts (:func:`resolve_data`). The
readers of harness/data.segmentation give the layout rules; what a protocol trains for how long is
its own."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from harness.errors import ConfigError, DataError


@dataclass(frozen=True)
class MmsegLayout:
    """How mmsegmentation's dataset config reads a data set."""

    name: str
    mmseg_type: str
    num_classes: int
    reduce_zero_label: bool
    layout: Literal["ade", "voc", "context", "coco_stuff"]
    seg_map_suffix: str = ".png"


# By dataset-registry name (harness.registry.DATASETS: the readers, or the data sets only mmseg reads).
LAYOUTS = {layout.name: layout for layout in (
    MmsegLayout("voc12aug", "PascalVOCDataset", 21, False, "voc"),
    MmsegLayout("ade20k", "ADE20KDataset", 150, True, "ade"),
    # CrIBo's configs/_base_/datasets/pascal_context.py: 60 classes (background included).
    MmsegLayout("pascal_context", "PascalContextDataset", 60, False, "context"),
    # mmseg's pascal_context_59.py: background ignored (reduce_zero_label).
    MmsegLayout("pascal_context_59", "PascalContextDataset59", 59, True, "context"),
    MmsegLayout("coco_stuff164k", "COCOStuffDataset", 171, False, "coco_stuff", seg_map_suffix="_labelTrainIds.png"),
)}

# Other names accepted. synth_*: SynthScenes' copies of the layouts (any root with a SynthScenes
# meta.json is read with its own class names whatever the name used).
ALIASES = {"ade": "ade20k", "coco_stuff": "coco_stuff164k", "pascal_context_60": "pascal_context",
           "synth_ade": "ade20k", "synth_voc": "voc12aug", "voc": "voc12aug"}


def mmseg_layout(name: str) -> MmsegLayout:
    """How mmseg reads the data set ``name`` (a key of LAYOUTS or an alias)."""
    layout = LAYOUTS.get(ALIASES.get(name, name))
    if layout is None:
        raise ConfigError(f"segmentation dataset {name!r} is unknown; choose one of "
                          f"{', '.join(LAYOUTS)} (aliases: {', '.join(sorted(ALIASES))})")
    return layout


@dataclass
class ResolvedData:
    """Where the data is and how mmseg reads it (mmseg dataset dicts, without pipelines)."""

    spec: MmsegLayout
    root: Path
    classes: tuple[str, ...] | None  # SynthScenes class names (None: the mmseg dataset's own)
    train: list[dict]                # one dict per dataset concatenated for training
    val: dict
    train_lists: list[str]           # what was used, for the record

    @property
    def num_classes(self) -> int:
        return len(self.classes) if self.classes else self.spec.num_classes

    @property
    def is_synthetic(self) -> bool:
        return self.classes is not None


def _first_dir(root: Path, candidates: list[Path], marker: str, what: str) -> Path:
    if not root.exists():
        raise DataError(f"{what} root {root} does not exist")
    for c in candidates:
        if (c / marker).exists():
            return c
    raise DataError(f"no {what} layout under {root}: expected {marker} in one of "
                    f"{', '.join(str(c) for c in candidates)}")


def resolve_data(name: str, data_root: str | Path) -> ResolvedData:
    """Find the dataset folders under ``data_root`` (the real layouts or SynthScenes')."""
    from harness.data.io import find_synth_meta

    spec = mmseg_layout(name)
    root = Path(data_root).expanduser().resolve()
    common = dict(reduce_zero_label=spec.reduce_zero_label, img_suffix=".jpg",
                  seg_map_suffix=spec.seg_map_suffix)
    base, train, val, lists = _layout_splits(spec, root)
    _check_splits(spec, base, train + [val], common)
    meta = find_synth_meta(base, levels=2)
    classes = _synth_classes(name, spec, base, meta, train + [val])
    return ResolvedData(spec, base, classes, train, val, lists)


def _layout_splits(spec: MmsegLayout, root: Path) -> tuple[Path, list[dict], dict, list[str]]:
    """(dataset folder, train dataset dicts, val dataset dict, train lists used) of the layout."""
    from harness.data.segmentation import ADE20KSegmentation

    if spec.layout == "ade":
        base = ADE20KSegmentation._resolve_root(root)  # the harness readers' layout rules
        train = [dict(data_prefix=dict(img_path="images/training", seg_map_path="annotations/training"))]
        val = dict(data_prefix=dict(img_path="images/validation", seg_map_path="annotations/validation"))
        lists = ["images/training"]
    elif spec.layout == "voc":
        return _voc_splits(root)
    elif spec.layout == "context":
        base = _first_dir(root, [root, root / "VOC2010", root / "VOCdevkit" / "VOC2010"],
                          "SegmentationClassContext", "Pascal Context (VOC2010)")
        prefix = dict(img_path="JPEGImages", seg_map_path="SegmentationClassContext")
        train = [dict(data_prefix=prefix, ann_file="ImageSets/SegmentationContext/train.txt")]
        val = dict(data_prefix=dict(prefix), ann_file="ImageSets/SegmentationContext/val.txt")
        lists = ["train.txt"]
    else:
        base = _first_dir(root, [root, root / "coco_stuff164k"], "annotations/train2017", "COCO-Stuff 164k")
        train = [dict(data_prefix=dict(img_path="images/train2017", seg_map_path="annotations/train2017"))]
        val = dict(data_prefix=dict(img_path="images/val2017", seg_map_path="annotations/val2017"))
        lists = ["images/train2017"]
    return base, train, val, lists


def _voc_splits(root: Path) -> tuple[Path, list[dict], dict, list[str]]:
    from harness.data.segmentation import VOCSegmentation

    base = VOCSegmentation._resolve_root(root)
    sets = base / "ImageSets" / "Segmentation"
    if (sets / "aug.txt").is_file():
        # mmseg's pascal_voc12_aug.py (and CrIBo's): train.txt + aug.txt, concatenated.
        train = [dict(data_prefix=dict(img_path="JPEGImages", seg_map_path="SegmentationClass"),
                      ann_file="ImageSets/Segmentation/train.txt"),
                 dict(data_prefix=dict(img_path="JPEGImages", seg_map_path="SegmentationClassAug"),
                      ann_file="ImageSets/Segmentation/aug.txt")]
        lists = ["train.txt", "aug.txt"]
    elif (sets / "trainaug.txt").is_file():
        # The common single-list layout (and SynthScenes'): trainaug.txt over SegmentationClassAug.
        train = [dict(data_prefix=dict(img_path="JPEGImages", seg_map_path="SegmentationClassAug"),
                      ann_file="ImageSets/Segmentation/trainaug.txt")]
        lists = ["trainaug.txt"]
    else:
        raise DataError(f"Pascal VOC aug lists not found in {sets}: expected aug.txt (mmseg's "
                        f"tools/dataset_converters/voc_aug.py) or trainaug.txt")
    val = dict(data_prefix=dict(img_path="JPEGImages", seg_map_path="SegmentationClass"),
               ann_file="ImageSets/Segmentation/val.txt")
    return base, train, val, lists


def _check_splits(spec: MmsegLayout, base: Path, sets: list[dict], common: dict) -> None:
    """Complete each dataset dict (``common`` settings, data_root) and check its folders and list."""
    for d in sets:
        d.update(common, data_root=str(base))
        for key in ("img_path", "seg_map_path"):
            if not (base / d["data_prefix"][key]).is_dir():
                raise DataError(f"{spec.name}: folder {base / d['data_prefix'][key]} not found; "
                                f"the dataset is incomplete")
        if "ann_file" in d and not (base / d["ann_file"]).is_file():
            raise DataError(f"{spec.name}: split list {base / d['ann_file']} not found")


def _synth_classes(name: str, spec: MmsegLayout, base: Path, meta, sets: list[dict]) -> tuple[str, ...] | None:
    """SynthScenes' class names for the layout (None for a real dataset); set on every dataset dict."""
    classes = None
    if name.startswith("synth_") and not meta:
        raise DataError(f"dataset {name!r} is SynthScenes' {spec.name} layout, but {base} has no "
                        f"SynthScenes meta.json; generate one with `ssl-bench data synth --out DIR` "
                        f"or name the real dataset ({spec.name})")
    if meta:
        names = meta.get("classes", {}).get("ade20k" if spec.layout == "ade" else "voc")
        if not names or spec.layout not in ("ade", "voc"):
            raise DataError(f"{base} is a SynthScenes root but has no {spec.name} class list")
        classes = tuple(names)
        for d in sets:
            # mmseg's VOC/ADE dataset classes would remap SynthScenes' labels through their own
            # class lists; the generic dataset with SynthScenes' names reads them as written.
            d["metainfo"] = dict(classes=classes)
    return classes
