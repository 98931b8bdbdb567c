"""What every reader of NAVI's frames (Probe3D's layout, data_processing/resize_navi.py) does the
same way: metres from the disparity PNG and the square crop around the object (Probe3D utils.py)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from PIL import Image

from harness.errors import DataError


def read_disparity_depth(path: Path) -> np.ndarray:
    """Metres from NAVI's disparity PNG (utils.py read_depth with scale 10, then / 1000)."""
    try:
        with Image.open(path) as im:
            raw = np.array(im).astype("uint16")
    except (OSError, ValueError) as exc:
        raise DataError(f"cannot read NAVI depth {path}: {exc}") from exc
    disparity = raw.astype(np.float32) / ((2 ** 16 - 1) * 10.0)
    disparity[disparity == 0] = np.inf
    return (1 / disparity) / 1000


def bbox_crop(maps: list[torch.Tensor], depth: torch.Tensor) -> list[torch.Tensor]:
    """The square around the pixels with depth > 0, centred on them where it fits, else pushed from
    the top-left corner into the frame (utils.py bbox_crop, its off-by-one box size kept)."""
    ys, xs = torch.nonzero(depth[0] > 0, as_tuple=True)
    tl = torch.stack([ys.min(), xs.min()])
    box = torch.stack([ys.max(), xs.max()]) - tl
    size = torch.tensor(depth.shape[1:])
    if box.max() > size.min():
        raise DataError("NAVI frame: the object's box is wider than the frame's short side (no square crop)")
    pad = box.max() - box
    start = tl - pad // 2
    if not ((start >= 0).all() and (start + box.max() <= size).all()):
        start = (tl - pad).clip(min=0)
    (y0, x0), side = start.tolist(), int(box.max())
    return [m[:, y0:y0 + side, x0:x0 + side] for m in maps]
