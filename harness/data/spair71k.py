"""SPair-71k in its published layout, read as Probe3D's ``evals/datasets/spair.py`` reads it:

- ``PairAnnotation/<trn|val|test>/*.json``: one pair each (``filename``
  ``<id>-<source>-<target>:<category>``, ``category``, ``viewpoint_variation``, ``trg_bndbox``
  ``[x1, y1, x2, y2]``, ``trg_imsize`` ``[w, h, c]``);
- ``ImageAnnotation/<category>/<image>.json``: each image's keypoints (``kps``: index -> ``[x, y]``
  or null), read instead of the pair file's own keypoint lists, as Probe3D does;
- ``JPEGImages/<category>/<image>.jpg``.

``Layout/`` and ``Segmentation/`` are not read (Probe3D opens the masks but uses them only with
``mask_feats``, off in its SPair evaluation). Split names are Probe3D's (train, valid, test) or
SPair's folder names (trn, val, test).
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from harness.config import fingerprint as _fingerprint
from harness.data.io import files_stamp, load_rgb
from harness.errors import DataError
from harness.registry import register_dataset

SPLIT_FOLDERS = {"train": "trn", "valid": "val", "test": "test", "trn": "trn", "val": "val"}
LAYOUT_HINT = ("SPair-71k's layout: PairAnnotation/<trn|val|test>/*.json, ImageAnnotation/<category>/*.json, "
               "JPEGImages/<category>/*.jpg under the data root")


@dataclass(frozen=True)
class Pair:
    name: str            # the annotation's file name, without .json
    category: str
    source: str          # image names, without extension
    target: str
    viewpoint: int       # viewpoint_variation: 0 small, 1 medium, 2 large
    target_box: tuple    # (x1, y1, x2, y2) in the target image
    target_size: tuple   # trg_imsize[:2]


def _read_json(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise DataError(f"SPair annotation {path} does not exist; the data set is incomplete ({LAYOUT_HINT})") from None
    except (OSError, ValueError) as exc:
        raise DataError(f"cannot read SPair annotation {path}: {exc}") from exc


def _pair(path: Path) -> Pair:
    a = _read_json(path)
    try:
        _, source, target = a["filename"].split(":")[0].split("-")
        return Pair(path.stem, a["category"], source, target, int(a["viewpoint_variation"]),
                    tuple(int(v) for v in a["trg_bndbox"]), tuple(int(v) for v in a["trg_imsize"][:2]))
    except (KeyError, TypeError, ValueError) as exc:
        raise DataError(f"SPair pair annotation {path} lacks or misspells {exc}: expected filename "
                        f"'<id>-<source>-<target>:<category>', category, viewpoint_variation, trg_bndbox, "
                        f"trg_imsize") from None


def truncated_keypoints(kps: dict, path: Path) -> np.ndarray:
    """(K, 3) int: x, y and visibility of each of the image's K keypoints (K = the number of
    entries in ``kps``); coordinates truncated to integers (spair.py process_keypoints: .int())."""
    out = np.zeros((len(kps), 3), dtype=np.int64)
    for i in range(len(kps)):
        xy = kps.get(str(i))
        if xy:
            if len(xy) != 2:
                raise DataError(f"SPair image annotation {path}: keypoint {i} is {xy}, expected [x, y] or null")
            out[i] = (np.trunc(float(xy[0])), np.trunc(float(xy[1])), 1)
    return out


@register_dataset("spair71k")
class SPair71k:
    """``(root, split)``: ``pairs`` in file-name order; ``keypoints(category, image)``;
    ``image_path(category, image)``."""

    name = "spair71k"
    thread_safe = True

    def __init__(self, root: str | Path, split: str = "test"):
        if split not in SPLIT_FOLDERS:
            raise DataError(f"SPair-71k split {split!r} is unknown; choose one of train, valid, test")
        self.root, self.split = Path(root), split
        folder = self.root / "PairAnnotation" / SPLIT_FOLDERS[split]
        for need in (folder, self.root / "ImageAnnotation", self.root / "JPEGImages"):
            if not need.is_dir():
                raise DataError(f"SPair-71k folder {need} not found: expected {LAYOUT_HINT}")
        files = sorted(folder.glob("*.json"))
        if not files:
            raise DataError(f"SPair-71k pair folder {folder} holds no *.json pair annotation ({LAYOUT_HINT})")
        self.pairs = [_pair(p) for p in files]
        self._kps: dict[tuple[str, str], np.ndarray] = {}

    def __len__(self) -> int:
        return len(self.pairs)

    @property
    def categories(self) -> list[str]:
        return sorted({p.category for p in self.pairs})

    def image_path(self, category: str, image: str) -> Path:
        return self.root / "JPEGImages" / category / f"{image}.jpg"

    def keypoints(self, category: str, image: str) -> np.ndarray:
        key = (category, image)
        if key not in self._kps:
            path = self.root / "ImageAnnotation" / category / f"{image}.json"
            kps = _read_json(path).get("kps")
            if not isinstance(kps, dict):
                raise DataError(f"SPair image annotation {path} has no 'kps' mapping (index -> [x, y] or null)")
            self._kps[key] = truncated_keypoints(kps, path)
        return self._kps[key]

    def fingerprint(self) -> str:
        return _fingerprint({"dataset": self.name, "split": self.split, "pairs": [p.name for p in self.pairs]})

    def stamp(self) -> str:
        folder = self.root / "PairAnnotation" / SPLIT_FOLDERS[self.split]
        return files_stamp(sorted(folder.glob("*.json")))


class PairImages:
    """The ImageSource of the images a selection of pairs uses, in the given order."""

    thread_safe = True

    def __init__(self, data: SPair71k, images: list[tuple[str, str]]):
        self.data, self.images = data, list(images)
        self.paths = [data.image_path(c, n) for c, n in self.images]
        missing = [p for p in self.paths if not p.is_file()]
        if missing:
            raise DataError(f"SPair-71k image {missing[0]} does not exist ({len(missing)} missing); "
                            f"the data set is incomplete ({LAYOUT_HINT})")

    def __len__(self) -> int:
        return len(self.images)

    def load_image(self, i: int):
        return load_rgb(self.paths[i])

    def fingerprint(self) -> str:
        return _fingerprint({"dataset": "spair71k_images", "images": [f"{c}/{n}" for c, n in self.images]})

    def content_stamp(self) -> str:
        return files_stamp(self.paths)
