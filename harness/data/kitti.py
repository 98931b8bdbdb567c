"""KITTI depth, Eigen split, in the layout of Monocular-Depth-Estimation-Toolbox (configs/_base_/
datasets/kitti.py and depth/datasets/kitti.py, commit d8aff50; the BTS / AdaBins export DINOv2's
depth evaluation derives from):

    root/kitti_eigen_train.txt, root/kitti_eigen_test.txt    lines '<rgb> <depth> <focal>'
    root/input/<date>/<drive>_sync/image_02/data/<frame>.png   raw RGB frames (img_dir 'input')
    root/gt_depth/<drive>_sync/proj_depth/groundtruth/image_02/<frame>.png   (ann_dir 'gt_depth')

A depth path 'None' (a frame without projected LiDAR, 45 of the 697 test lines) is skipped, the
samples are sorted by image path, and depth is the 16-bit PNG divided by 256 (depth_scale), in
metres, 0 where the LiDAR gave nothing. The toolbox's train / val / test splits are the first
two files (val and test both read kitti_eigen_test.txt).
"""
from __future__ import annotations

from pathlib import Path


from harness.data.depth_png import DepthPngPairs
from harness.errors import DataError
from harness.registry import register_dataset

SPLIT_FILES = {"train": "kitti_eigen_train.txt", "val": "kitti_eigen_test.txt", "test": "kitti_eigen_test.txt"}
IMAGE_DIR, DEPTH_DIR = "input", "gt_depth"
STORED = "KITTI's PNGs hold metres x 256"
LAYOUT = ("the Monocular-Depth-Estimation-Toolbox layout: kitti_eigen_train.txt / kitti_eigen_test.txt at the "
          "root (lines '<rgb> <depth> <focal>'), images under input/, depth PNGs under gt_depth/")


def read_split(split_file: Path) -> list[tuple[str, str]]:
    """(image, depth) relative paths, 'None' depths skipped, sorted by image (kitti.py)."""
    pairs = []
    for line in split_file.read_text().splitlines():
        parts = line.split()
        if not parts:
            continue
        if len(parts) != 3:
            raise DataError(f"{split_file}: line '{line.strip()}' is not '<rgb> <depth> <focal>' ({LAYOUT})")
        if parts[1] != "None":
            pairs.append((parts[0], parts[1]))
    return sorted(pairs, key=lambda p: p[0])


@register_dataset("kitti")
class KITTIDepth(DepthPngPairs):
    """``(root, split)``; ``load_image(i)`` the RGB frame, ``load_depth(i)`` metres (float32,
    0 = no LiDAR return)."""

    name = "kitti"
    data_set = "KITTI"
    stored_units = stored_set = STORED
    set_guess = "another unit than metres x 256"
    thread_safe = True

    def __init__(self, root: str | Path, split: str = "train", depth_scale: float = 256.0,
                 max_depth: float = 80.0, check_units: int = 3):
        if split not in SPLIT_FILES:
            raise DataError(f"KITTI split {split!r} is unknown; choose one of {', '.join(SPLIT_FILES)}")
        self.root, self.split = Path(root), split
        self.depth_scale, self.max_depth = float(depth_scale), float(max_depth)
        split_file = self.root / SPLIT_FILES[split]
        if not split_file.is_file():
            raise DataError(f"KITTI split file {split_file} not found: expected {LAYOUT}")
        pairs = read_split(split_file)
        if not pairs:
            raise DataError(f"KITTI split file {split_file} lists no sample with ground truth")
        self.image_paths = [self.root / IMAGE_DIR / p[0].strip("/") for p in pairs]
        self.depth_paths = [self.root / DEPTH_DIR / p[1].strip("/") for p in pairs]
        self._check_listed(split_file, f": expected {LAYOUT}", check_units)
