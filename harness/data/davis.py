"""DAVIS-2017 in its official layout, as DINO's ``eval_video_segmentation.py`` (l. 284-291) and
davis2017-evaluation's ``davis2017/davis.py`` read it::

    <root>/ImageSets/2017/<split>.txt          one sequence name a line
    <root>/JPEGImages/480p/<sequence>/*.jpg    frames, in sorted file-name order
    <root>/Annotations/480p/<sequence>/*.png   palette PNGs: index k = object k, 0 background

``root`` is that folder or holds it as ``DAVIS/``. The first frame's annotation is the input of
the propagation; the others are the ground truth of the evaluation, so every frame needs one
(the semi-supervised val split has them all).
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from PIL import Image

from harness.config import fingerprint as _fingerprint
from harness.data.io import files_stamp, image_size, load_label_png, load_rgb
from harness.errors import DataError
from harness.registry import register_dataset


@dataclass(frozen=True)
class Sequence:
    name: str
    frames: tuple[Path, ...]
    annotations: tuple[Path, ...]

    @property
    def stems(self) -> list[str]:
        return [p.stem for p in self.frames]


def _listing(folder: Path, suffix: str) -> list[str]:
    try:
        return sorted(n for n in os.listdir(folder) if n.endswith(suffix))
    except FileNotFoundError:
        return []


@register_dataset("davis2017")
class DAVIS2017:
    """The sequences of one split; items are frames (sequence after sequence), for readers'
    generic code (``load_image(i)``, ``load_mask(i)``); the protocol reads ``sequences``."""

    name = "davis2017"
    is_synthetic = False

    def __init__(self, root: str | Path, split: str = "val", resolution: str = "480p"):
        root = Path(root)
        if not (root / "ImageSets").is_dir() and (root / "DAVIS" / "ImageSets").is_dir():
            root = root / "DAVIS"
        self.root, self.split, self.resolution = root, split, resolution
        split_file = root / "ImageSets" / "2017" / f"{split}.txt"
        if not split_file.is_file():
            raise DataError(f"DAVIS-2017 split file {split_file} not found; the data root must hold "
                            f"ImageSets/2017/{split}.txt, JPEGImages/{resolution}/ and Annotations/{resolution}/")
        names = [ln.strip() for ln in split_file.read_text().splitlines() if ln.strip()]
        if not names:
            raise DataError(f"{split_file} lists no sequence")
        self.sequences = [self._sequence(n, split_file) for n in names]
        self.is_synthetic = (root / "meta.json").is_file()
        self._items = [(s, t) for s in range(len(self.sequences)) for t in range(len(self.sequences[s].frames))]
        self.stems = [f"{self.sequences[s].name}/{self.sequences[s].frames[t].stem}" for s, t in self._items]

    def _sequence(self, name: str, split_file: Path) -> Sequence:
        image_dir = self.root / "JPEGImages" / self.resolution / name
        ann_dir = self.root / "Annotations" / self.resolution / name
        frames = _listing(image_dir, ".jpg")
        if not frames:
            raise DataError(f"sequence {name!r} listed in {split_file} has no frames: no *.jpg in {image_dir}")
        have = set(_listing(ann_dir, ".png"))
        first = frames[0][:-4] + ".png"
        if first not in have:
            raise DataError(f"sequence {name!r}: no annotation for its first frame {frames[0]} "
                            f"(expected {ann_dir / first}); the first mask is what is propagated")
        missing = [f[:-4] + ".png" for f in frames if f[:-4] + ".png" not in have]
        if missing:
            shown = ", ".join(missing[:5]) + (f", ... ({len(missing)} in all)" if len(missing) > 5 else "")
            raise DataError(f"sequence {name!r}: {len(missing)} frame annotation(s) missing in {ann_dir} "
                            f"({shown}); the evaluation compares every frame with its annotation")
        return Sequence(name, tuple(image_dir / f for f in frames),
                        tuple(ann_dir / (f[:-4] + ".png") for f in frames))

    def __len__(self) -> int:
        return len(self._items)

    def __repr__(self) -> str:
        return (f"DAVIS2017(root={str(self.root)!r}, split={self.split!r}, sequences={len(self.sequences)}, "
                f"frames={len(self)})")

    def load_image(self, i: int) -> Image.Image:
        s, t = self._items[i]
        return load_rgb(self.sequences[s].frames[t], refuse_rotated=True)

    def load_mask(self, i: int) -> np.ndarray:
        s, t = self._items[i]
        return self.annotation(self.sequences[s], t)

    def annotation(self, seq: Sequence, t: int) -> np.ndarray:
        """(H, W) uint8 palette indices of frame t's annotation, checked against its frame's size."""
        path = seq.annotations[t]
        mask = load_label_png(path)
        w, h = image_size(seq.frames[t])
        if mask.shape != (h, w):
            raise DataError(f"annotation {path} is {mask.shape[1]}x{mask.shape[0]} (width x height) but its frame "
                            f"{seq.frames[t]} is {w}x{h}; replace one of them")
        return mask

    def frame(self, seq: Sequence, t: int) -> np.ndarray:
        """(H, W, 3) uint8 RGB of frame t."""
        return np.asarray(load_rgb(seq.frames[t], refuse_rotated=True))

    def content_stamp(self) -> str:
        return files_stamp([p for s in self.sequences for p in (*s.frames, *s.annotations)])

    def fingerprint(self) -> str:
        """Hash of the root-relative file lists + split: equal across machines and data roots."""
        return _fingerprint({"dataset": self.name, "split": self.split, "resolution": self.resolution,
                   "sequences": {s.name: [p.relative_to(self.root).as_posix() for p in (*s.frames, *s.annotations)]
                                 for s in self.sequences}})
