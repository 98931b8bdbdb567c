"""SynthScenes for detection: the generator's scenes with every object as a COCO instance (its box
and its visible-pixel mask), in COCO 2017's layout, so the real COCO reader and mmdet's
``CocoDataset`` are what read it:

    <root>/meta.json
    <root>/annotations/instances_{train2017,val2017}.json
    <root>/{train2017,val2017}/<id>.jpg

Scenes are harness.data.synthetic's ``draw_scene`` (1..max_objects distinct things on one or two
stuffs; train and val from their own streams). The things in a scene are distinct classes, so an
object's visible mask is its class's pixels of the scene's label map; it is written as an
uncompressed RLE (column-major run lengths, as COCO's), its box as [x, y, w, h] of those pixels,
its area their count. Categories are the 12 thing classes (ids 1..12). Objects with fewer than
``min_pixels`` visible pixels are left out.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from PIL import Image

from harness.data.generated import write_once
from harness.data.synthetic import NUM_STUFF, THING_CLASSES, draw_scene
from harness.errors import ConfigError

GENERATOR_VERSION = 1
JPEG_QUALITY = 95
SPLITS = {"train2017": "train", "val2017": "val"}


@dataclass(frozen=True)
class DetectionPreset:
    name: str
    image_size: int
    train: int
    val: int
    max_objects: int = 3
    min_pixels: int = 16


PRESETS = {
    "tiny": DetectionPreset("tiny", 128, train=32, val=12),
    "small": DetectionPreset("small", 128, train=160, val=40),
    "medium": DetectionPreset("medium", 192, train=1200, val=200),
}


def rle_counts(mask: np.ndarray) -> list[int]:
    """COCO's uncompressed RLE of a binary mask: run lengths in column-major order, zeros first."""
    flat = np.asarray(mask, dtype=np.uint8).flatten(order="F")
    change = np.flatnonzero(np.diff(flat)) + 1
    bounds = np.concatenate([[0], change, [flat.size]])
    runs = np.diff(bounds).tolist()
    return ([0] + runs) if flat.size and flat[0] == 1 else runs


def instances(label: np.ndarray, objects: list[dict], min_pixels: int) -> list[dict]:
    """(category id, mask, box) of each object with at least ``min_pixels`` visible pixels."""
    out = []
    for obj in objects:
        mask = label == obj["label"]
        if mask.sum() < min_pixels:
            continue
        ys, xs = np.nonzero(mask)
        box = [int(xs.min()), int(ys.min()), int(xs.max() - xs.min() + 1), int(ys.max() - ys.min() + 1)]
        out.append({"category_id": obj["label"] - NUM_STUFF + 1, "mask": mask, "bbox": box})
    return out


def _write_split(root: Path, split: str, cfg: DetectionPreset, seed: int) -> None:
    folder = root / split
    folder.mkdir(parents=True)
    count = cfg.train if split == "train2017" else cfg.val
    images, annotations = [], []
    for index in range(count):
        drawn = draw_scene(seed, SPLITS[split], index, cfg.image_size, max_objects=cfg.max_objects)
        name = f"{index:06d}.jpg"
        Image.fromarray(drawn.image).save(folder / name, "JPEG", quality=JPEG_QUALITY, subsampling=0)
        image_id = index + 1
        images.append({"id": image_id, "file_name": name, "height": cfg.image_size, "width": cfg.image_size})
        for inst in instances(drawn.label, drawn.objects, cfg.min_pixels):
            annotations.append({"id": len(annotations) + 1, "image_id": image_id, "category_id": inst["category_id"],
                                "bbox": inst["bbox"], "area": int(inst["mask"].sum()), "iscrowd": 0,
                                "segmentation": {"size": [cfg.image_size, cfg.image_size],
                                                 "counts": rle_counts(inst["mask"])}})
    categories = [{"id": i + 1, "name": name, "supercategory": "thing"} for i, name in enumerate(THING_CLASSES)]
    (root / "annotations").mkdir(exist_ok=True)
    (root / "annotations" / f"instances_{split}.json").write_text(
        json.dumps({"images": images, "annotations": annotations, "categories": categories}))


def _meta(preset: str, seed: int) -> dict:
    cfg = PRESETS[preset]
    return {"generator": "synthscenes", "set": "detection", "preset": preset, "seed": seed,
            "version": GENERATOR_VERSION, "image_size": cfg.image_size, "train": cfg.train, "val": cfg.val,
            "max_objects": cfg.max_objects, "min_pixels": cfg.min_pixels}


def generate(out_dir, preset: str = "small", seed: int = 0, progress: bool = True) -> Path:
    """Write the detection set under ``out_dir`` (once: harness.data.generated.write_once)."""
    if preset not in PRESETS:
        raise ConfigError(f"unknown SynthScenes detection preset {preset!r}; choose one of {', '.join(PRESETS)}")

    def write(tmp: Path) -> None:
        for split in SPLITS:
            _write_split(tmp, split, PRESETS[preset], seed)

    return write_once(out_dir, _meta(preset, seed), write)
