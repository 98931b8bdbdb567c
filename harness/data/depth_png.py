"""Depth maps stored as one-channel 16-bit PNGs (NYU's millimetres, KITTI's metres x 256): the map in
metres, and the checks that catch a set stored in other units (centimetres where metres or
millimetres are expected) from the range of its values."""
from __future__ import annotations

from pathlib import Path

import numpy as np
from PIL import Image

from harness.config import fingerprint as _fingerprint
from harness.data.io import files_stamp, load_rgb
from harness.errors import DataError


def check_depth_units(depth_m: np.ndarray, path, max_depth: float, scale: float, stored: str = "millimetres") -> None:
    """A depth map in centimetres where metres are expected shows in its range: a 99th
    percentile above 3 x max_depth (30 m for NYU's 10 m) is no indoor room. ``stored``: what
    the PNG must hold (NYU millimetres, KITTI metres x 256)."""
    valid = depth_m[depth_m > 0]
    if valid.size and (p99 := float(np.percentile(valid, 99))) > 3 * max_depth:
        raise DataError(f"depth map {path} reads {p99:.3g} m at its 99th percentile, beyond 3 x the "
                        f"{max_depth:g} m range: it looks like centimetres where metres are expected "
                        f"(the PNG must hold {stored}, read with depth_scale {scale:g})")


def check_scale_of_set(maps: list[np.ndarray], paths, max_depth: float, scale: float,
                       stored: str = "NYU's PNGs hold millimetres",
                       guess: str = "centimetres where millimetres are expected") -> None:
    """Centimetres read as millimetres make a whole set ten times too shallow: refused when the
    deepest 99th percentile of the first maps stays under max_depth / 10 (1 m for NYU, whose
    rooms reach several metres). One close-up alone does not trip it."""
    p99 = [float(np.percentile(m[m > 0], 99)) for m in maps if (m > 0).any()]
    if p99 and max(p99) < max_depth / 10:
        raise DataError(f"depth maps {paths[0]} .. {paths[len(maps) - 1]} reach only {max(p99):.3g} m: they look "
                        f"like {guess} ({stored}, read "
                        f"with depth_scale {scale:g}); convert them or set depth_scale")


def read_depth_png(path: Path, data_set: str, depth_scale: float) -> np.ndarray:
    """A one-channel 16-bit depth PNG in metres (stored value / ``depth_scale``); one DataError naming
    the file when it is missing, unreadable or not one channel."""
    try:
        with Image.open(path) as im:
            raw = np.asarray(im)
    except FileNotFoundError:
        raise DataError(f"{data_set} depth map {path} does not exist; the data set is incomplete") from None
    except (OSError, ValueError) as exc:
        raise DataError(f"cannot read {data_set} depth map {path}: {exc}") from exc
    if raw.ndim != 2:
        raise DataError(f"{data_set} depth map {path} has shape {raw.shape}: expected a one-channel 16-bit PNG "
                        f"(metres x {depth_scale:g})")
    return raw.astype(np.float32) / depth_scale


class DepthPngPairs:
    """What the readers of (RGB image, depth PNG) pairs share once a subclass has listed its
    ``image_paths`` / ``depth_paths``: the first files checked, the set's units checked on its first
    maps, and the images, maps in metres, fingerprint and stamp. A subclass names its data set
    (``data_set``) and what its PNGs hold (``stored_units`` per map, ``stored_set`` and
    ``set_guess`` for the set)."""

    name: str
    data_set: str
    stored_units = "millimetres"
    stored_set = "NYU's PNGs hold millimetres"
    set_guess = "centimetres where millimetres are expected"
    root: Path
    split: str
    depth_scale: float
    max_depth: float
    image_paths: list[Path]
    depth_paths: list[Path]

    def _check_listed(self, split_file: Path, missing: str, check_units: int) -> None:
        """The first image and map exist (``missing`` ends the error), and the first ``check_units``
        maps are in the units the set must hold."""
        for p in self.image_paths[:1] + self.depth_paths[:1]:
            if not p.is_file():
                raise DataError(f"{self.data_set} file {p} (listed in {split_file}) does not exist{missing}")
        first = [self.load_depth(i) for i in range(min(check_units, len(self)))]
        check_scale_of_set(first, self.depth_paths, self.max_depth, self.depth_scale, self.stored_set,
                           guess=self.set_guess)

    def __len__(self) -> int:
        return len(self.image_paths)

    def load_image(self, i: int):
        return load_rgb(self.image_paths[i])

    def load_depth(self, i: int) -> np.ndarray:
        path = self.depth_paths[i]
        depth = read_depth_png(path, self.data_set, self.depth_scale)
        check_depth_units(depth, path, self.max_depth, self.depth_scale, self.stored_units)
        return depth

    def fingerprint(self) -> str:
        return _fingerprint({"dataset": self.name, "split": self.split, "depth_scale": self.depth_scale,
                             "images": [p.relative_to(self.root).as_posix() for p in self.image_paths],
                             "depths": [p.relative_to(self.root).as_posix() for p in self.depth_paths]})

    def stamp(self) -> str:
        return files_stamp(self.image_paths + self.depth_paths)
