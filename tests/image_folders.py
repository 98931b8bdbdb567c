"""Tiny image folders on disk for the tests: labelled ImageFolder splits whose classes differ
by pattern, and unlabelled noise images for the pretraining datasets."""
from __future__ import annotations

from pathlib import Path

import numpy as np
from PIL import Image

PATTERN_CLASSES = ("a_stripes", "b_checks", "c_flat")


def make_image_folder(root: Path, splits=(("train", 6), ("val", 3)), classes=PATTERN_CLASSES,
                      size=32, seed=0) -> Path:
    """ImageFolder splits (``root/<split>/<class>/*.png``, ``splits``: (split, images per class))
    whose classes differ by pattern (stripes / checks / flat) in random colours, so that pixels
    alone cannot tell them apart by colour."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:size, 0:size]
    patterns = [(yy // 4) % 2, ((yy // 4) + (xx // 4)) % 2, np.zeros((size, size), int)]
    for split, per_class in splits:
        for c, name in enumerate(classes):
            d = root / split / name
            d.mkdir(parents=True, exist_ok=True)
            for i in range(per_class):
                a, b = rng.integers(0, 256, 3), rng.integers(0, 256, 3)
                img = np.where(patterns[c % len(patterns)][..., None] == 1, a, b)
                img = np.clip(img + rng.normal(0, 8, img.shape), 0, 255).astype(np.uint8)
                Image.fromarray(img).save(d / f"{name}_{split}_{i}.png")
    return root


def make_noise_folder(root: Path, n: int = 6, size: int = 80) -> Path:
    """``n`` random RGB PNGs of size x (size + 8) in two class folders: pretraining images."""
    rng = np.random.default_rng(0)
    for i in range(n):
        d = root / f"class{i % 2}"
        d.mkdir(parents=True, exist_ok=True)
        Image.fromarray(rng.integers(0, 256, (size, size + 8, 3), dtype=np.uint8)).save(d / f"img{i}.png")
    return root
