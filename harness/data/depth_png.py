"""Depth maps stored as one-channel 16-bit PNGs (NYU's millimetres, KITTI's metres x 256): the map in
metres, and the checks that catch a set stored in other units (centimetres where metres or
millimetres are expected) from the range of its values."""
from __future__ import annotations

from pathlib import Path

import numpy as np
from PIL import Image

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
