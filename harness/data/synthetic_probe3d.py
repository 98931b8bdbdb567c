"""SynthScenes with geometry for Probe3D's dense probes: rooms whose depth and surface normals are
known exactly, written in the Probe3D NYU layout (data set ``nyu``, layout ``probe3d``: GeoNet
``.mat`` files for training, one pickle for the test frames; read by nyu_probe3d.py).

A pinhole camera (focal 0.9 x width) looks at a back wall (a plane at 5.5-8.5 m, turned by up to
0.5 rad about the vertical), above a floor (1.2-1.6 m below), at a side wall on one side, and at
one to three objects: tilted planar discs and squares, and spheres (centre 1.5-5 m away). Each
pixel takes the nearest surface along its ray (a z-buffer); its normal is that surface's, facing
the camera (camera frame: x right, y down, z forward), analytic for planes and spheres; its
colour is the surface's texture shaded by the angle to a light, so that orientation shows in the
pixels. 10% of the test frames' pixels (random blobs) have depth 0, which the metrics leave out.
numpy and scipy.io only, seeded per image.

The same root also holds a NAVI-layout set (navi_probe3d.py): per object, two multiview
collections and a wild_set of 64 x 48 frames of one or two textured spheres 0.5-0.9 m away, depth
only on the object (as NAVI's), written as NAVI's disparity PNG with an annotations.json.
"""
from __future__ import annotations

import json
import pickle
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from harness.data.generated import write_once
from harness.data.nyu_probe3d import GEONET_DIR, GEONET_MEANS, TEST_PICKLE
from harness.errors import ConfigError

VERSION = 2
GENERATOR = "synthscenes-probe3d"


@dataclass(frozen=True)
class Preset:
    n_train: int
    n_test: int
    height: int = 60   # NYU's 480 x 640 frame / 8
    width: int = 80


PRESETS = {"tiny": Preset(24, 8), "small": Preset(200, 50)}
NAVI_VIEWS = {"tiny": 8, "small": 24}   # per collection; 3 objects x (2 multiview + wild_set)
NAVI_SIZE = (48, 64)


def _plane(rays: np.ndarray, n: np.ndarray, d: float) -> tuple[np.ndarray, np.ndarray]:
    """(z along each ray (inf where behind or parallel), normal per pixel) of the plane n.X = d."""
    denom = rays @ n
    with np.errstate(divide="ignore", invalid="ignore"):
        t = d / denom
    z = np.where((np.abs(denom) > 1e-9) & (t > 0), t, np.inf)
    return z, np.broadcast_to(n, rays.shape)


def _sphere(rays: np.ndarray, c: np.ndarray, r: float) -> tuple[np.ndarray, np.ndarray]:
    a = (rays ** 2).sum(-1)
    b = rays @ c
    disc = b ** 2 - a * (c @ c - r * r)
    with np.errstate(invalid="ignore"):
        t = (b - np.sqrt(disc)) / a
    z = np.where((disc > 0) & (t > 0), t, np.inf)
    normal = rays * np.where(np.isfinite(z), z, 0)[..., None] - c
    return z, normal / np.linalg.norm(normal, axis=-1, keepdims=True)


def _surfaces(rng: np.random.Generator, rays: np.ndarray, h: int, w: int, f: float) -> list:
    a = rng.uniform(-0.5, 0.5)
    wall = np.array([np.sin(a), 0.0, -np.cos(a)])
    out = [_plane(rays, wall, -rng.uniform(5.5, 8.5) * np.cos(a)),
           _plane(rays, np.array([0.0, -1.0, 0.0]), -rng.uniform(1.2, 1.6))]
    side = rng.choice([-1.0, 1.0])
    out.append(_plane(rays, np.array([-side, 0.0, 0.0]), -side * rng.uniform(1.8, 3.0)))
    for _ in range(int(rng.integers(1, 4))):
        centre = np.array([rng.uniform(-0.35, 0.35) * w / f, rng.uniform(-0.3, 0.3) * h / f, 1.0])
        centre *= rng.uniform(1.5, 5.0)
        if rng.random() < 0.5:
            out.append(_sphere(rays, centre, rng.uniform(0.15, 0.35) * centre[2] * min(h, w) / f))
            continue
        n = np.array([rng.uniform(-0.7, 0.7), rng.uniform(-0.7, 0.7), -1.0])
        n /= np.linalg.norm(n)
        z, normal = _plane(rays, n, float(n @ centre))
        offset = rays * np.where(np.isfinite(z), z, 0)[..., None] - centre
        size = rng.uniform(0.2, 0.4) * centre[2] * min(h, w) / f
        inside = np.linalg.norm(offset, axis=-1) <= size if rng.random() < 0.5 else np.abs(offset).max(-1) <= size
        out.append((np.where(inside, z, np.inf), normal))
    return out


def render(rng: np.random.Generator, h: int, w: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(uint8 (h, w, 3) image, float32 (h, w) depth in metres, float32 (3, h, w) unit normals)."""
    f = 0.9 * w
    v, u = np.mgrid[0:h, 0:w].astype(np.float64)
    rays = np.stack([(u + 0.5 - w / 2) / f, (v + 0.5 - h / 2) / f, np.ones((h, w))], axis=-1)
    surfaces = _surfaces(rng, rays, h, w, f)
    zs = np.stack([s[0] for s in surfaces])
    nearest = np.argmin(zs, axis=0)
    depth = np.take_along_axis(zs, nearest[None], 0)[0]
    normals = np.zeros((h, w, 3))
    for k, (_, n) in enumerate(surfaces):
        normals[nearest == k] = n[nearest == k]
    normals *= np.where((normals * rays).sum(-1) > 0, -1.0, 1.0)[..., None]  # face the camera
    light = np.array([0.4, -0.6, -0.7]) / np.linalg.norm([0.4, -0.6, -0.7])
    shade = 0.35 + 0.65 * np.clip(normals @ light, 0, 1)
    colours = rng.uniform(70, 240, size=(len(surfaces), 3))
    points = rays * depth[..., None]
    stripes = 0.85 + 0.15 * (np.floor((points[..., 0] + points[..., 2]) / 0.5) % 2)
    img = colours[nearest] * (shade * stripes)[..., None] + rng.normal(0, 3, size=(h, w, 3))
    depth = np.where(np.isfinite(depth), depth, 0)
    return np.clip(img, 0, 255).astype(np.uint8), depth.astype(np.float32), normals.transpose(2, 0, 1).astype(
        np.float32)


def _holes(rng: np.random.Generator, h: int, w: int) -> np.ndarray:
    """A mask of missing depth: a few discs covering about a tenth of the frame."""
    v, u = np.mgrid[0:h, 0:w]
    mask = np.zeros((h, w), bool)
    for _ in range(3):
        cy, cx, r = rng.uniform(0, h), rng.uniform(0, w), 0.1 * min(h, w) * rng.uniform(0.8, 1.2)
        mask |= (v - cy) ** 2 + (u - cx) ** 2 <= r * r
    return mask


def _write_train(root: Path, cfg: Preset, seed: int) -> None:
    import scipy.io

    folder = root / GEONET_DIR
    folder.mkdir(parents=True)
    for i in range(cfg.n_train):
        img, depth, normals = render(np.random.default_rng([seed, 0, i]), cfg.height, cfg.width)
        # GeoNet stores minus twice the means; +0.25 so that the reader's truncation gives back the integer
        stored = img.astype(np.float64) - 2 * np.asarray(GEONET_MEANS) + 0.25
        scipy.io.savemat(folder / f"room_{i % 5}_{i:04d}_0-{i:06d}.mat",
                         {"img": stored, "depth": depth, "norm": normals.transpose(1, 2, 0)})


def _write_test(root: Path, cfg: Preset, seed: int) -> None:
    images, depths, normals = [], [], []
    for i in range(cfg.n_test):
        rng = np.random.default_rng([seed, 1, i])
        img, depth, snorm = render(rng, cfg.height, cfg.width)
        depth[_holes(rng, cfg.height, cfg.width)] = 0
        images.append(img.transpose(2, 0, 1))
        depths.append(depth)
        normals.append(snorm)
    n = cfg.n_test
    data = {"images": np.stack(images), "depths": np.stack(depths), "snorms": np.stack(normals),
            "scene_types": [[f"room_{i % 5}"] for i in range(n)],
            "train_indices": np.arange(0), "test_indices": np.arange(n)}
    (root / TEST_PICKLE).parent.mkdir(parents=True)
    with open(root / TEST_PICKLE, "wb") as fh:
        pickle.dump(data, fh)


def render_object(rng: np.random.Generator, h: int, w: int, f: float) -> tuple[np.ndarray, np.ndarray]:
    """(uint8 image, float depth in metres, 0 off the object) of one or two spheres."""
    v, u = np.mgrid[0:h, 0:w].astype(np.float64)
    rays = np.stack([(u + 0.5 - w / 2) / f, (v + 0.5 - h / 2) / f, np.ones((h, w))], axis=-1)
    hits = []
    for _ in range(int(rng.integers(1, 3))):
        centre = np.array([rng.uniform(-0.08, 0.08), rng.uniform(-0.05, 0.05), rng.uniform(0.5, 0.9)])
        hits.append(_sphere(rays, centre, rng.uniform(0.06, 0.12)))
    zs = np.stack([z for z, _ in hits])
    nearest, depth = np.argmin(zs, axis=0), zs.min(axis=0)
    normals = np.choose(nearest[..., None], [n for _, n in hits])
    on = np.isfinite(depth)
    light = np.array([0.4, -0.6, -0.7]) / np.linalg.norm([0.4, -0.6, -0.7])
    shade = 0.3 + 0.7 * np.clip(-(normals @ light), 0, 1)
    colour = rng.uniform(80, 240, size=(len(hits), 3))[nearest]
    img = np.where(on[..., None], colour * np.nan_to_num(shade)[..., None], rng.uniform(20, 120, size=3))
    img += rng.normal(0, 3, size=img.shape)
    return np.clip(img, 0, 255).astype(np.uint8), np.where(on, depth, 0.0)


def _write_navi(root: Path, views: int, seed: int) -> None:
    from PIL import Image

    h, w = NAVI_SIZE
    for o in range(3):
        for c, name in enumerate(["multiview_00_synth", "multiview_01_synth", "wild_set"]):
            folder = root / f"synth_object_{o}" / name
            (folder / "images").mkdir(parents=True)
            (folder / "depth").mkdir()
            annotations = []
            for i in range(views):
                rng = np.random.default_rng([seed, 2, o, c, i])
                f = float(rng.uniform(0.9, 1.2) * w)
                img, depth = render_object(rng, h, w, f)
                disparity = np.where(depth > 0, np.round(655.35 / np.maximum(depth, 1e-6)), 0).astype(np.uint16)
                for stem in (f"{i:03d}", f"downsampled_{i:03d}"):  # the listed original and the one read
                    Image.fromarray(img).save(folder / "images" / f"{stem}.jpg", quality=95)
                Image.fromarray(disparity).save(folder / "depth" / f"downsampled_{i:03d}.png")
                annotations.append({"filename": f"{i:03d}.jpg", "image_size": [h, w], "split": "train",
                                    "camera": {"focal_length": f, "q": [1.0, 0.0, 0.0, 0.0], "t": [0.0, 0.0, 0.0]}})
            (folder / "annotations.json").write_text(json.dumps(annotations))


def generate(out_dir, preset: str = "small", seed: int = 0, progress: bool = True) -> Path:
    """Write the ``preset`` data set under ``out_dir`` (once: harness.data.generated.write_once)."""
    if preset not in PRESETS:
        raise ConfigError(f"unknown probe3d SynthScenes preset {preset!r}; choose one of {', '.join(PRESETS)}")
    cfg = PRESETS[preset]
    meta = {"generator": GENERATOR, "preset": preset, "seed": seed, "version": VERSION,
            "layout": "nyu_probe3d + navi_probe3d", "size": [cfg.height, cfg.width], "navi_size": list(NAVI_SIZE)}

    def write(tmp: Path) -> None:
        _write_train(tmp, cfg, seed)
        _write_test(tmp, cfg, seed)
        _write_navi(tmp, NAVI_VIEWS[preset], seed)

    return write_once(out_dir, meta, write)
