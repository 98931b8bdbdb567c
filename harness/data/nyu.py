"""NYU Depth v2 in the layout DINOv3 reads (dinov3/data/datasets/nyu.py, the BTS / Monocular-
Depth-Estimation-Toolbox export): ``root/nyu_train.txt`` and ``root/nyu_test.txt``, one line per
sample ``<rgb relpath> <depth relpath> <focal>`` (leading "/" stripped, lines sorted), the depth a
16-bit PNG in millimetres (config.py normalization_constant 1000). DINOv3's VAL and TEST splits
both read nyu_test.txt (the 654 Eigen test images).

Depth is returned in metres; maps whose values lie far outside the expected range (centimetres
read as metres, each map; centimetres read as millimetres, the first three maps) are a
DataError naming the files.
"""
from __future__ import annotations

from pathlib import Path


from harness.data.depth_png import DepthPngPairs
from harness.errors import DataError
from harness.registry import register_dataset

SPLIT_FILES = {"train": "nyu_train.txt", "val": "nyu_test.txt", "test": "nyu_test.txt"}


@register_dataset("nyu")
class NYUDepth(DepthPngPairs):
    """``(root, split)``; ``load_image(i)`` the RGB image, ``load_depth(i)`` metres (float32, 0 =
    no measurement)."""

    name = "nyu"
    data_set = "NYU"
    thread_safe = True

    def __init__(self, root: str | Path, split: str = "train", depth_scale: float = 1000.0,
                 max_depth: float = 10.0, check_units: int = 3):
        if split not in SPLIT_FILES:
            raise DataError(f"NYU split {split!r} is unknown; choose one of {', '.join(SPLIT_FILES)}")
        self.root, self.split = Path(root), split
        self.depth_scale, self.max_depth = float(depth_scale), float(max_depth)
        split_file = self.root / SPLIT_FILES[split]
        if not split_file.is_file():
            raise DataError(f"NYU split file {split_file} not found: the layout DINOv3 reads has "
                            f"nyu_train.txt and nyu_test.txt at the data root (lines '<rgb> <depth> <focal>')")
        self.image_paths, self.depth_paths = [], []
        for n, line in enumerate(sorted(split_file.read_text().splitlines()), 1):
            parts = line.split()
            if not parts:
                continue
            if len(parts) != 3:
                raise DataError(f"{split_file}: line '{line.strip()}' is not '<rgb> <depth> <focal>'")
            self.image_paths.append(self.root / parts[0].strip("/"))
            self.depth_paths.append(self.root / parts[1].strip("/"))
        if not self.image_paths:
            raise DataError(f"NYU split file {split_file} lists no samples")
        self._check_listed(split_file, "; the data set is incomplete", check_units)
