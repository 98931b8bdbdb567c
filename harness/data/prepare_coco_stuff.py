"""COCO-Stuff 164k from the official archives to the layout mmseg's ``COCOStuffDataset`` reads
(``coco:stuff164k``), as mmsegmentation's ``tools/dataset_converters/coco_stuff164k.py`` makes it:

- ``train2017.zip`` / ``val2017.zip`` (cocodataset.org) extracted to ``images/{train2017,val2017}/``;
- each mask of ``stuffthingmaps_trainval2017.zip`` (``{train2017,val2017}/<id>.png``: 0-based COCO
  category ids 0..181, 255 unlabelled) written as ``annotations/<split>/<id>_labelTrainIds.png`` with
  the ids mapped to 171 contiguous train ids: the 182 ids minus the 11 that COCO-Stuff never labels
  (:data:`UNUSED`, thing categories without 2017 annotations), in order; 255 stays 255, and any other
  value is kept as it is (the converter's table leaves it alone too).

``check(root)`` (``data check coco:stuff164k``; mmseg reads the layout, so the harness has no reader
for it) counts the images and masks of each split against the official sizes (118,287 / 5,000),
names images without a mask, and reads the first masks' values (train ids 0..170 and 255).
"""
from __future__ import annotations

import io
from pathlib import Path

import numpy as np
from PIL import Image

from harness.data.archives import open_zip
from harness.data.prepare import Steps, require

IMAGE_ZIPS = {"train2017": "train2017.zip", "val2017": "val2017.zip"}
MASK_ZIP = "stuffthingmaps_trainval2017.zip"
SUFFIX = "_labelTrainIds.png"
SIZES = {"train2017": 118_287, "val2017": 5_000}
UNUSED = (11, 25, 28, 29, 44, 65, 67, 68, 70, 82, 90)  # 0-based ids: COCO categories 12, 26, 29, 30, 45, 66, ...
IGNORE = 255
SHOWN, SAMPLED = 3, 5


def train_id_table() -> np.ndarray:
    """uint8 lookup: stuffthingmaps value -> train id (unmapped values unchanged)."""
    table = np.arange(256, dtype=np.uint8)
    used = [i for i in range(182) if i not in UNUSED]
    table[used] = np.arange(len(used), dtype=np.uint8)
    return table


def _images(steps: Steps, zips: dict[str, Path]) -> None:
    def extract(staging: Path) -> dict:
        counts = {}
        for split, path in zips.items():
            with open_zip(path) as zf:
                names = [n for n in zf.namelist() if n.startswith(f"{split}/") and not n.endswith("/")]
                for name in names:
                    zf.extract(name, staging / "images")
            counts[split] = len(names)
        return counts

    steps.run("images", extract)


def _masks(steps: Steps, mask_zip: Path) -> None:
    table = train_id_table()

    def convert(staging: Path) -> dict:
        counts = dict.fromkeys(IMAGE_ZIPS, 0)
        with open_zip(mask_zip) as zf:
            for name in zf.namelist():
                split, _, fname = name.partition("/")
                if split not in counts or not fname.endswith(".png"):
                    continue
                mask = np.asarray(Image.open(io.BytesIO(zf.read(name))))
                folder = staging / "annotations" / split
                folder.mkdir(parents=True, exist_ok=True)
                Image.fromarray(table[mask]).save(folder / (Path(fname).stem + SUFFIX))
                counts[split] += 1
        return counts

    steps.run("masks", convert)


def prepare(steps: Steps) -> None:
    paths = require(steps.download, *IMAGE_ZIPS.values(), MASK_ZIP)
    _images(steps, dict(zip(IMAGE_ZIPS, paths)))
    _masks(steps, paths[-1])


def _split_check(root: Path, split: str) -> tuple[list[str], list[str]]:
    images = {p.stem for p in (root / "images" / split).glob("*.jpg")}
    masks = sorted((root / "annotations" / split).glob(f"*{SUFFIX}"))
    stems = {p.name[: -len(SUFFIX)] for p in masks}
    facts = [f"split {split}: {len(images):,} images, {len(masks):,} masks (official {SIZES[split]:,})"]
    problems = []
    if len(images) != SIZES[split]:
        problems.append(f"split {split}: {len(images):,} images, official {SIZES[split]:,}")
    if images - stems:
        problems.append(f"split {split}: {len(images - stems):,} images without a {SUFFIX} mask, e.g. "
                        f"{', '.join(sorted(images - stems)[:SHOWN])}")
    values = set()
    for mask in masks[:SAMPLED]:
        values |= set(np.unique(np.asarray(Image.open(mask))).tolist())
    bad = sorted(v for v in values if v > 170 and v != IGNORE)
    if bad:
        problems.append(f"split {split}: mask values {bad[:SHOWN]} are not train ids (0..170, 255): the "
                        f"stuffthingmaps are not converted")
    return facts, problems


def check(root: Path) -> tuple[list[str], list[str]]:
    facts, problems = [], []
    for split in SIZES:
        if not (root / "images" / split).is_dir() or not (root / "annotations" / split).is_dir():
            facts.append(f"split {split}: MISSING")
            problems.append(f"split {split}: images/{split}/ or annotations/{split}/ not found")
            continue
        more = _split_check(root, split)
        facts += more[0]
        problems += more[1]
    return facts, problems
