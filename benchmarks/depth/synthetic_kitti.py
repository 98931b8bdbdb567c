"""Depth SynthScenes in KITTI's Eigen-split layout (harness/data/kitti.py): the scenes of
synthetic.py scaled 8 times (walls at 44-68 m, inside KITTI's 80 m), on frames of KITTI's raw
shape / 8 (47x155, so the KB crop / 8, 44x152, and the Garg crop scale onto them), with the ground
truth sparse as projected LiDAR is: no return in the top third of the frame, a third of the other
pixels kept. Depth PNGs hold metres x 256; each test split lists one frame without ground truth
('None'), as KITTI's does 45 times.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
from PIL import Image

from benchmarks.depth.synthetic import render
from harness.data.generated import write_once
from harness.errors import ConfigError

VERSION = 1
GENERATOR = "synthscenes-depth-kitti"
SCALE = 8.0          # room metres -> street metres
FOCAL = "721.5377"   # the focal the toolbox's split files give 2011_09_26 (unused by the protocol)


@dataclass(frozen=True)
class Preset:
    n_train: int
    n_test: int
    height: int = 47     # KITTI raw 375x1242 / 8
    width: int = 155


PRESETS = {"tiny": Preset(24, 8), "small": Preset(160, 40)}


def sparse_depth(depth: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """LiDAR-like ground truth: nothing above the top third, a third of the rest kept."""
    out = np.where(rng.random(depth.shape) < 1 / 3, depth, 0.0)
    out[: depth.shape[0] // 3] = 0.0
    return out


def _names(split: str, i: int) -> tuple[str, str]:
    drive = f"2011_09_26_drive_{(1 if split == 'train' else 2):04d}_sync"
    return (f"2011_09_26/{drive}/image_02/data/{i:010d}.png",
            f"{drive}/proj_depth/groundtruth/image_02/{i:010d}.png")


def _write_split(root: Path, split: str, count: int, cfg: Preset, seed: int) -> None:
    lines = []
    for i in range(count):
        rng = np.random.default_rng([seed, 10 if split == "train" else 11, i])
        img, depth, _ = render(rng, cfg.height, cfg.width)
        gt = sparse_depth(np.minimum(depth * SCALE, 79.0), rng)
        image, target = _names(split, i)
        (root / "input" / image).parent.mkdir(parents=True, exist_ok=True)
        (root / "gt_depth" / target).parent.mkdir(parents=True, exist_ok=True)
        Image.fromarray(img).save(root / "input" / image)
        Image.fromarray(np.clip(np.round(gt * 256.0), 0, 65535).astype(np.uint16)).save(root / "gt_depth" / target)
        lines.append(f"{image} {target} {FOCAL}")
    if split == "test":
        lines.append(f"{_names(split, count)[0]} None {FOCAL}")  # a frame without projected LiDAR
    name = "kitti_eigen_train.txt" if split == "train" else "kitti_eigen_test.txt"
    (root / name).write_text("\n".join(lines) + "\n")


def generate(out_dir, preset: str = "tiny", seed: int = 0, progress: bool = True) -> Path:
    """Write the ``preset`` set under ``out_dir`` (once: harness.data.generated.write_once)."""
    if preset not in PRESETS:
        raise ConfigError(f"unknown KITTI depth SynthScenes preset {preset!r}; choose one of {', '.join(PRESETS)}")
    cfg = PRESETS[preset]
    meta = {"generator": GENERATOR, "preset": preset, "seed": seed, "version": VERSION,
            "layout": "kitti_eigen", "depth_unit": "m/256", "size": [cfg.height, cfg.width]}

    def write(tmp: Path) -> None:
        _write_split(tmp, "train", cfg.n_train, cfg, seed)
        _write_split(tmp, "test", cfg.n_test, cfg, seed)

    return write_once(out_dir, meta, write)
