"""Pascal Context from its official files (``VOCtrainval_03-May-2010.tar`` and the PASCAL in Detail
annotation ``trainval_merged.json``) to the layout mmseg's ``PascalContextDataset`` /
``PascalContextDataset59`` read, as mmsegmentation's ``tools/dataset_converters/pascal_context.py``
makes it with the Detail API (github.com/zhanghang1989/detail-api, not on PyPI; its class mask is
rebuilt here from the JSON with pycocotools' RLE decoder, which is the COCO mask code the Detail API
bundles):

- the VOC 2010 archive extracted as it is (``VOCdevkit/VOC2010/...``);
- per image of phase ``train`` / ``val``: its class mask (zeros, then each of its ``annos_segmentation``
  masks in the JSON's order written with its ``category_id``, a later one over an earlier one, as
  ``Detail.getMask``), mapped to 0..59 by rank among the 60 kept ids (0 = background and the 59
  classes), to ``SegmentationClassContext/<name>.png``; a pixel of any other category is refused (the
  converter asserts it away); ``ImageSets/SegmentationContext/{train,val}.txt``, sorted.

The 59 kept categories are found in the JSON's ``categories`` by the names of mmseg's own
``PascalContextDataset59`` class list (compared without case, spaces or underscores); their ids in
ascending order must give that list's (alphabetical) order, else the JSON is refused. That the
names of the real trainval_merged.json match is not verified here (no copy of it was at hand).

``check(root)``: the list sizes against the official ones (train 4,996, val 5,104), the JPEG and
mask of every listed image, and the first masks' values (0..59).
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from PIL import Image

from harness.data import archives
from harness.data.prepare import Steps, require
from harness.errors import DataError

VOC_TAR, DETAIL_JSON = "VOCtrainval_03-May-2010.tar", "trainval_merged.json"
BASE = Path("VOCdevkit") / "VOC2010"
MASKS, LISTS = "SegmentationClassContext", Path("ImageSets") / "SegmentationContext"
SIZES = {"train": 4_996, "val": 5_104}
SHOWN, SAMPLED = 3, 5


def _norm(name: str) -> str:
    return "".join(c for c in name.lower() if c.isalnum())


def kept_ids(categories: list[dict]) -> np.ndarray:
    """The 60 kept category ids in ascending order (0, then the 59 classes)."""
    from mmseg.datasets import PascalContextDataset59

    names = list(PascalContextDataset59.METAINFO["classes"])
    by_name = {_norm(str(c.get("name", ""))): int(c["category_id"]) for c in categories}
    absent = [n for n in names if _norm(n) not in by_name]
    if absent:
        raise DataError(f"{DETAIL_JSON}'s categories lack {', '.join(absent[:SHOWN])} (of the 59 Pascal Context "
                        f"classes): not the PASCAL in Detail annotation file")
    ids = [by_name[_norm(n)] for n in names]
    if ids != sorted(ids) or 0 in ids:
        raise DataError(f"{DETAIL_JSON}: the 59 classes' ids are not in their alphabetical order (or one is 0), "
                        f"so the ranks would not be mmseg's class indices")
    return np.array([0, *ids])


def class_mask(image: dict, segments: list[dict]) -> np.ndarray:
    """Detail.getMask(img) for a whole image: category ids, later annotations over earlier ones."""
    from pycocotools import mask as rle

    mask = np.zeros((int(image["height"]), int(image["width"])), dtype=np.int64)
    for seg in segments:
        mask[np.asarray(rle.decode(seg["segmentation"])) != 0] = int(seg["category_id"])
    return mask


def _convert(doc: dict, base: Path) -> dict:
    ids = kept_ids(doc.get("categories", []))
    by_image: dict[int, list[dict]] = {}
    for seg in doc.get("annos_segmentation", []):
        by_image.setdefault(seg["image_id"], []).append(seg)
    lists: dict[str, list[str]] = {"train": [], "val": []}
    (base / MASKS).mkdir(parents=True)
    for image in doc.get("images", []):
        if image.get("phase") not in lists:
            continue
        mask = class_mask(image, by_image.get(image["image_id"], []))
        other = sorted(set(np.unique(mask).tolist()) - set(ids.tolist()))
        if other:
            raise DataError(f"{image['file_name']} has pixels of categories {other[:SHOWN]} outside the 60 kept ones "
                            f"(mmseg's converter asserts there are none): not the merged annotation file")
        stem = Path(image["file_name"]).stem
        Image.fromarray(np.searchsorted(ids, mask).astype(np.uint8)).save(base / MASKS / f"{stem}.png")
        lists[image["phase"]].append(stem)
    (base / LISTS).mkdir(parents=True)
    for split, stems in lists.items():
        (base / LISTS / f"{split}.txt").write_text("".join(f"{s}\n" for s in sorted(stems)))
    return {split: len(stems) for split, stems in lists.items()}


def prepare(steps: Steps) -> None:
    voc_tar, detail_json = require(steps.download, VOC_TAR, DETAIL_JSON)

    def voc(staging: Path) -> dict:
        return {"files": archives.extract(voc_tar, staging)}

    def context(staging: Path) -> dict:
        try:
            import pycocotools  # noqa: F401
        except ImportError as exc:
            raise DataError("decoding the Detail JSON's RLE masks needs pycocotools (pip install pycocotools)") \
                from exc
        try:
            doc = json.loads(detail_json.read_text())
        except (ValueError, UnicodeDecodeError) as exc:
            raise DataError(f"{detail_json} is not JSON ({exc}): download it again") from exc
        return _convert(doc, staging / BASE)

    steps.run("voc2010", voc)
    steps.run("context", context)


def _base(root: Path) -> Path | None:
    return next((c for c in (root, root / "VOC2010", root / BASE) if (c / MASKS).is_dir()), None)


def check(root: Path) -> tuple[list[str], list[str]]:
    base = _base(root)
    if base is None:
        return ["SegmentationClassContext: MISSING"], [f"no {MASKS}/ under {root}, {root / 'VOC2010'} or "
                                                      f"{root / BASE}: `ssl-bench data prepare pascal_context` "
                                                      f"writes it"]
    facts, problems = [], []
    for split, size in SIZES.items():
        listing = base / LISTS / f"{split}.txt"
        if not listing.is_file():
            facts.append(f"split {split}: MISSING")
            problems.append(f"split {split}: {listing} not found")
            continue
        stems = [s.strip() for s in listing.read_text().splitlines() if s.strip()]
        facts.append(f"split {split}: {len(stems):,} images (official {size:,})")
        if len(stems) != size:
            problems.append(f"split {split}: {len(stems):,} images, official {size:,}")
        absent = [s for s in stems if not (base / "JPEGImages" / f"{s}.jpg").is_file()
                  or not (base / MASKS / f"{s}.png").is_file()]
        if absent:
            problems.append(f"split {split}: {len(absent):,} listed images lack their JPEG or mask, e.g. "
                            f"{', '.join(absent[:SHOWN])}")
        values = {v for s in stems[:SAMPLED] if (base / MASKS / f"{s}.png").is_file()
                  for v in np.unique(np.asarray(Image.open(base / MASKS / f"{s}.png"))).tolist()}
        if any(v > 59 for v in values):
            problems.append(f"split {split}: mask values above 59 ({max(values)}): not converted to the 60 classes")
    return facts, problems
