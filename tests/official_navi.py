"""A tiny NAVI v1 download in the official format, for tests/test_data_prepare_navi.py: the tree of
github.com/google/navi's README, ``navi_v1/<object>/{3d_scan/<object>.obj, multiview_00_pixel6/,
wild_set/}``, each collection with ``annotations.json`` (a list of {"object_id", "camera": {"q"
[w, x, y, z], "t" [mm], "focal_length"}, "filename", "image_size" [h, w], "scene_name", "split"}),
``images/NNN.jpg``, ``depth/NNN.png`` (16-bit disparity, raw = 655.35 / metres, objects 0.3-0.9 m
away, 0 off them) and ``masks/NNN.png``; packed as ``navi_v1.tar.gz`` or left extracted. One image
carries EXIF orientation 6 (rotated), as some phone captures of the release do. Every draw is seeded.
"""
from __future__ import annotations

import json
import shutil
import tarfile
from pathlib import Path

import numpy as np
from PIL import Image

OBJECTS = ("toy_duck", "3d_dollhouse_sink")
COLLECTIONS = ("multiview_00_pixel6", "wild_set")
VIEWS = 3
SIZE = (24, 32)  # (h, w) of the originals: small, so the 1024 short side is an upsampling here
ROTATED = "toy_duck/wild_set/images/001.jpg"  # the one image with EXIF orientation 6


def _quaternion(rng: np.random.Generator) -> list[float]:
    q = np.array([1.0, *rng.uniform(-0.3, 0.3, 3)])
    return (q / np.linalg.norm(q)).tolist()


def _view(folder: Path, i: int, rng: np.random.Generator, rotated: bool) -> dict:
    h, w = SIZE
    yy, xx = np.mgrid[:h, :w]
    on = (yy - h / 2) ** 2 / (h / 3) ** 2 + (xx - w / 2) ** 2 / (w / 3) ** 2 < 1
    rgb = np.where(on[..., None], rng.integers(120, 255, 3), rng.integers(0, 100, (h, w, 3))).astype(np.uint8)
    exif = Image.Exif()
    if rotated:
        exif[0x0112] = 6
    Image.fromarray(rgb).save(folder / "images" / f"{i:03d}.jpg", quality=95, exif=exif.tobytes())
    disparity = np.where(on, rng.integers(700, 2_000, (h, w)), 0).astype(np.uint16)
    Image.fromarray(disparity).save(folder / "depth" / f"{i:03d}.png")
    Image.fromarray(on.astype(np.uint8) * 255).save(folder / "masks" / f"{i:03d}.png")
    return {"object_id": folder.parent.name, "filename": f"{i:03d}.jpg", "image_size": [h, w],
            "scene_name": folder.name, "split": "train",
            "camera": {"q": _quaternion(rng), "t": rng.uniform(-50, 50, 3).tolist(),
                       "focal_length": float(rng.uniform(0.9, 1.2) * w)}}


def write_navi_download(download: Path, packed: bool, seed: int = 0) -> Path:
    """Write the download under ``download``; the archive's path, or the extracted tree's."""
    tree = download / "navi_v1"
    for o, obj in enumerate(OBJECTS):
        (tree / obj / "3d_scan").mkdir(parents=True)
        (tree / obj / "3d_scan" / f"{obj}.obj").write_text("v 0 0 0\nv 1 0 0\nv 0 1 0\nf 1 2 3\n")
        for c, name in enumerate(COLLECTIONS):
            folder = tree / obj / name
            for sub in ("images", "depth", "masks"):
                (folder / sub).mkdir(parents=True)
            rows = [_view(folder, i, np.random.default_rng([seed, o, c, i]),
                          f"{obj}/{name}/images/{i:03d}.jpg" == ROTATED) for i in range(VIEWS)]
            (folder / "annotations.json").write_text(json.dumps(rows))
    if not packed:
        return tree
    archive = download / "navi_v1.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(tree, arcname="navi_v1")
    shutil.rmtree(tree)
    return archive


def truncate(path: Path) -> None:
    """Cut a file to half its bytes (a download that stopped early)."""
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])

