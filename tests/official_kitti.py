"""A tiny KITTI depth download in the official packing, for tests/test_data_prepare_kitti.py: raw
drive zips ``<date>_drive_<NNNN>_sync.zip`` (members ``<date>/<drive>_sync/{image_00,image_02,
image_03}/data/<frame>.png``, ``velodyne_points/data/<frame>.bin``, ``oxts/...``), the depth
benchmark's ``data_depth_annotated.zip`` (``train|val/<drive>_sync/proj_depth/groundtruth/
image_0[23]/<frame>.png``: 16-bit PNGs of metres x 256, 0 without LiDAR) and the toolbox's two
split files (lines '<rgb> <depth> <focal>', 'None' for a frame without ground truth). Every draw
is seeded.
"""
from __future__ import annotations

import io
import zipfile
from pathlib import Path

import numpy as np
from PIL import Image

DATE = "2011_09_26"
DRIVES = {"train": f"{DATE}_drive_0001_sync", "test": f"{DATE}_drive_0002_sync"}
FRAMES = 3
FOCAL = "721.5377"


def _png(array: np.ndarray) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(array).save(buf, "PNG")
    return buf.getvalue()


def write_kitti_download(download: Path, seed: int = 0) -> dict[str, list[str]]:
    """Write the download; the split files' lines by split (the test drive's last frame has no depth)."""
    download.mkdir(parents=True)
    rng = np.random.default_rng(seed)
    lines: dict[str, list[str]] = {}
    with zipfile.ZipFile(download / "data_depth_annotated.zip", "w") as depth_zip:
        for split, drive in DRIVES.items():
            with zipfile.ZipFile(download / f"{drive}.zip", "w") as raw:
                raw.writestr(f"{DATE}/{drive}/oxts/dataformat.txt", "lat: latitude of the oxts-unit\n")
                for f in range(FRAMES):
                    frame = f"{f:010d}"
                    for cam in ("image_00", "image_02", "image_03"):
                        channels = (16, 24) if cam == "image_00" else (16, 24, 3)
                        raw.writestr(f"{DATE}/{drive}/{cam}/data/{frame}.png",
                                     _png(rng.integers(0, 255, channels, dtype=np.uint8)))
                    raw.writestr(f"{DATE}/{drive}/velodyne_points/data/{frame}.bin", rng.bytes(64))
                    metres = np.where(rng.random((16, 24)) < 0.3, rng.uniform(5, 60, (16, 24)), 0)
                    has_depth = not (split == "test" and f == FRAMES - 1)
                    gt = f"{drive}/proj_depth/groundtruth/image_02/{frame}.png"
                    if has_depth:
                        folder = "train" if split == "train" else "val"
                        depth_zip.writestr(f"{folder}/{gt}", _png((metres * 256).astype(np.uint16)))
                    lines.setdefault(split, []).append(
                        f"{DATE}/{drive}/image_02/data/{frame}.png {gt if has_depth else 'None'} {FOCAL}")
    for split, rows in lines.items():
        (download / f"kitti_eigen_{split}.txt").write_text("\n".join(rows) + "\n")
    return lines


def truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
