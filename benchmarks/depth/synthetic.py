"""SynthScenes with geometry for ``depth_linear``: rooms whose depth is known exactly, written in
the NYU layout the reader takes (nyu_train.txt / nyu_test.txt, RGB JPEG + 16-bit PNG depth in mm).

A pinhole camera (focal 0.9 x width) looks at a back wall (a plane at 5.5-8.5 m, turned by up to
0.4 rad about the vertical), above a floor (a plane 1.2-1.6 m below the camera) and at one to
four planar shapes (disc, square, triangle; a plane through a point at 1-5 m along the ray of the
shape's centre, tilted by up to 0.6 in each direction). Each pixel's depth is the nearest surface
along its ray (a z-buffer: occlusion order respected); its colour is the surface's texture (a
world-space checkerboard on the floor, world-space stripes on the wall, a colour with noise on a
shape), darkened with distance. numpy and PIL only, seeded per image.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from PIL import Image

from harness.data.generated import write_once
from harness.errors import ConfigError

VERSION = 2
GENERATOR = "synthscenes-depth"


@dataclass(frozen=True)
class Preset:
    n_train: int
    n_test: int
    height: int = 60   # NYU's 480x640 frame / 8: the Eigen crop and NYU crop scale onto it
    width: int = 80


PRESETS = {"tiny": Preset(32, 12), "small": Preset(240, 60)}


def _rays(h: int, w: int, f: float) -> np.ndarray:
    v, u = np.mgrid[0:h, 0:w].astype(np.float64)
    return np.stack([(u + 0.5 - w / 2) / f, (v + 0.5 - h / 2) / f, np.ones((h, w))], axis=-1)


def _plane_depth(rays: np.ndarray, n: np.ndarray, d: float) -> np.ndarray:
    """z of the plane n.X = d along each ray (rays have z = 1); inf where it is not in front."""
    denom = rays @ n
    with np.errstate(divide="ignore", invalid="ignore"):
        z = d / denom
    return np.where((denom > 1e-9) & (z > 0), z, np.inf)


def _shape_mask(kind: str, h: int, w: int, cx: float, cy: float, r: float, theta: float) -> np.ndarray:
    v, u = np.mgrid[0:h, 0:w].astype(np.float64) + 0.5
    x, y = u - cx, v - cy
    xr, yr = x * np.cos(theta) + y * np.sin(theta), -x * np.sin(theta) + y * np.cos(theta)
    if kind == "disc":
        return xr ** 2 + yr ** 2 <= r ** 2
    if kind == "square":
        return (np.abs(xr) <= r * 0.8) & (np.abs(yr) <= r * 0.8)
    # triangle: three half-planes
    inside = np.ones((h, w), bool)
    for k in range(3):
        a = theta + k * 2 * np.pi / 3
        inside &= (x * np.cos(a) + y * np.sin(a)) <= r * 0.5
    return inside


def render(rng: np.random.Generator, h: int, w: int) -> tuple[np.ndarray, np.ndarray, float]:
    """(uint8 (h, w, 3) image, float (h, w) depth in metres, focal in pixels)."""
    f = 0.9 * w
    rays = _rays(h, w, f)
    a, z_wall = rng.uniform(-0.4, 0.4), rng.uniform(5.5, 8.5)
    wall_n = np.array([np.sin(a), 0.0, np.cos(a)])
    surfaces = [(_plane_depth(rays, wall_n, z_wall * np.cos(a)), "wall", None)]
    surfaces.append((_plane_depth(rays, np.array([0.0, 1.0, 0.0]), rng.uniform(1.2, 1.6)), "floor", None))
    for _ in range(int(rng.integers(1, 5))):
        kind = ("disc", "square", "triangle")[int(rng.integers(3))]
        cx, cy = rng.uniform(0.15, 0.85) * w, rng.uniform(0.15, 0.8) * h
        r = rng.uniform(0.1, 0.22) * min(h, w)
        n = np.array([rng.uniform(-0.6, 0.6), rng.uniform(-0.6, 0.6), 1.0])
        n /= np.linalg.norm(n)
        centre = np.array([(cx - w / 2) / f, (cy - h / 2) / f, 1.0]) * rng.uniform(1.0, 5.0)
        z = _plane_depth(rays, n, float(n @ centre))
        z[~_shape_mask(kind, h, w, cx, cy, r, rng.uniform(0, np.pi))] = np.inf
        surfaces.append((z, "shape", rng.uniform(40, 255, size=3)))
    stack = np.stack([s[0] for s in surfaces])
    nearest = np.argmin(stack, axis=0)
    depth = np.take_along_axis(stack, nearest[None], 0)[0]
    points = rays * depth[..., None]
    img = np.zeros((h, w, 3))
    wall_c, floor_c = rng.uniform(60, 230, size=(2, 3)), rng.uniform(60, 230, size=(2, 3))
    for k, (_, name, colour) in enumerate(surfaces):
        where = nearest == k
        if name == "wall":
            stripe = (np.floor(points[..., 0] / 0.4) % 2).astype(int)
            img[where] = wall_c[stripe[where]]
        elif name == "floor":
            check = ((np.floor(points[..., 0] / 0.5) + np.floor(points[..., 2] / 0.5)) % 2).astype(int)
            img[where] = floor_c[check[where]]
        else:
            img[where] = colour * rng.uniform(0.85, 1.15, size=(int(where.sum()), 1))
    img *= (1.0 / (1.0 + 0.08 * np.minimum(depth, 20.0)))[..., None] * 1.3
    img += rng.normal(0, 3, size=img.shape)
    return np.clip(img, 0, 255).astype(np.uint8), depth, f


def _write_split(root: Path, split: str, count: int, cfg: Preset, seed: int) -> None:
    lines = []
    for i in range(count):
        rng = np.random.default_rng([seed, 0 if split == "train" else 1, i])
        img, depth, f = render(rng, cfg.height, cfg.width)
        folder = root / split / f"scene_{i:04d}"
        folder.mkdir(parents=True, exist_ok=True)
        Image.fromarray(img).save(folder / f"rgb_{i:05d}.jpg", "JPEG", quality=95, subsampling=0)
        mm = np.clip(np.round(depth * 1000.0), 0, 65535).astype(np.uint16)
        Image.fromarray(mm).save(folder / f"sync_depth_{i:05d}.png")
        lines.append(f"/{split}/scene_{i:04d}/rgb_{i:05d}.jpg /{split}/scene_{i:04d}/sync_depth_{i:05d}.png {f:.4f}")
    (root / f"nyu_{split}.txt").write_text("\n".join(lines) + "\n")


def _meta_matches(path: Path, preset: str, seed: int) -> bool:
    try:
        meta = json.loads(path.read_text())
    except (OSError, ValueError):
        return False
    return (meta.get("generator"), meta.get("preset"), meta.get("seed"), meta.get("version")) == (
        GENERATOR, preset, seed, VERSION)


def generate(out_dir, preset: str = "small", seed: int = 0, progress: bool = True) -> Path:
    """Write the ``preset`` data set under ``out_dir`` (once: harness.data.generated.write_once)."""
    if preset not in PRESETS:
        raise ConfigError(f"unknown depth SynthScenes preset {preset!r}; choose one of {', '.join(PRESETS)}")
    cfg = PRESETS[preset]
    meta = {"generator": GENERATOR, "preset": preset, "seed": seed, "version": VERSION,
            "layout": "nyu", "depth_unit": "mm", "size": [cfg.height, cfg.width]}

    def write(tmp: Path) -> None:
        _write_split(tmp, "train", cfg.n_train, cfg, seed)
        _write_split(tmp, "test", cfg.n_test, cfg, seed)

    return write_once(out_dir, meta, write)
