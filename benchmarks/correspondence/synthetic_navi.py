"""NAVI SynthScenes: textured ellipsoids seen from several calibrated cameras, with exact depth and
pose, written in NAVI's layout as Probe3D reads it (harness/data/navi_pairs.py): per object a ``wild_set`` and a
``multiview_00`` collection, each with annotations.json (image_size, camera focal_length, q, t in
mm), images/<id>.jpg, images/downsampled_<id>.jpg and depth/downsampled_<id>.png (NAVI's disparity
encoding, 65535 x 10 / depth in mm).

Each object is an ellipsoid (semi-axes 60-100 mm, turned at random) coloured by a function of the
point on its surface in the object's frame (sums of sinusoids, so that a point looks the same from
every view and no two places alike), lit from a fixed direction, on a smooth random background
without depth. The cameras look at the object's centre from 380-520 mm, their azimuths 20 degrees
apart (plus jitter) and elevations between -20 and 30 degrees, so that pairs span Probe3D's rotation
bins. Depth is the ray's z in the camera frame; 3D correspondences between two views are exact up
to the depth encoding's rounding (under 0.5 mm). numpy and PIL only, seeded per object.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from PIL import Image

from harness.data.generated import write_once
from harness.errors import ConfigError

VERSION = 1
GENERATOR = "synthscenes-navi"
SIZE = (120, 160)           # image_size [h, w]
FOCAL = 1.1 * SIZE[1]       # pixels
LIGHT = np.array([0.3, -0.6, -0.75]) / np.linalg.norm([0.3, -0.6, -0.75])


@dataclass(frozen=True)
class Preset:
    objects: int
    wild_views: int
    multiview_views: int = 3


PRESETS = {"tiny": Preset(3, 8), "small": Preset(4, 16)}


def look_at(centre: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """World-to-camera (R, t) of a camera at ``centre`` looking at the origin, x right, y down
    (world up is -y), z forward."""
    z = -centre / np.linalg.norm(centre)
    x = np.cross(z, [0.0, -1.0, 0.0])
    x /= np.linalg.norm(x)
    r = np.stack([x, np.cross(z, x), z])
    return r, -r @ centre


def quaternion(r: np.ndarray) -> list[float]:
    """(w, x, y, z) of a rotation matrix (the largest of the four terms first, for precision)."""
    t = np.trace(r)
    cases = [t, r[0, 0], r[1, 1], r[2, 2]]
    k = int(np.argmax(cases))
    if k == 0:
        s = 2 * np.sqrt(1 + t)
        q = [s / 4, (r[2, 1] - r[1, 2]) / s, (r[0, 2] - r[2, 0]) / s, (r[1, 0] - r[0, 1]) / s]
    else:
        i, j, m = k - 1, k % 3, (k + 1) % 3
        s = 2 * np.sqrt(1 + r[i, i] - r[j, j] - r[m, m])
        v = [0.0, 0.0, 0.0]
        v[i], v[j], v[m] = s / 4, (r[j, i] + r[i, j]) / s, (r[m, i] + r[i, m]) / s
        q = [(r[m, j] - r[j, m]) / s, *v]
    return [float(c) for c in q]


def _random_rotation(rng) -> np.ndarray:
    q, _ = np.linalg.qr(rng.normal(size=(3, 3)))
    return q * np.sign(np.linalg.det(q))


def _texture(rng):
    freqs = rng.normal(size=(3, 3, 3)) * (2 * np.pi / 45.0)  # channel x component x xyz, per mm
    phases = rng.uniform(0, 2 * np.pi, size=(3, 3))
    return lambda p: np.stack([sum(np.sin(p @ freqs[c, k] + phases[c, k]) for k in range(3)) / 3
                               for c in range(3)], axis=-1) * 0.5 + 0.5


def render_view(obj: dict, r: np.ndarray, t: np.ndarray, background: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(uint8 image, depth in mm with 0 where the ray misses) of the object seen by camera (r, t)."""
    h, w = SIZE
    v, u = np.mgrid[0:h, 0:w].astype(np.float64) + 0.5
    rays = np.stack([(u - w / 2) / FOCAL, (v - h / 2) / FOCAL, np.ones_like(u)], -1)  # z = 1: s is depth
    centre = -r.T @ t
    o = (obj["rotation"].T @ centre) / obj["axes"]
    d = (rays @ r @ obj["rotation"]) / obj["axes"]
    a, b, c = (d * d).sum(-1), 2 * (d * o).sum(-1), o @ o - 1
    disc = b * b - 4 * a * c
    hit = disc > 0
    s = np.where(hit, (-b - np.sqrt(np.where(hit, disc, 0))) / (2 * a), 0.0)
    p = o + s[..., None] * d  # on the unit sphere of the scaled frame
    normal_obj = p / obj["axes"]
    normal = normal_obj @ obj["rotation"].T
    normal /= np.linalg.norm(normal, axis=-1, keepdims=True)
    shade = 0.55 + 0.45 * np.clip(normal @ -LIGHT, 0, 1)
    colour = obj["texture"](p * obj["axes"]) * 255 * shade[..., None]
    image = np.where(hit[..., None], colour, background)
    return np.clip(image, 0, 255).astype(np.uint8), np.where(hit, s, 0.0)


def _views(rng, n: int) -> list[np.ndarray]:
    start = rng.uniform(0, 360)
    out = []
    for i in range(n):
        az = np.deg2rad(start + 20 * i + rng.uniform(-5, 5))
        el = np.deg2rad(rng.uniform(-20, 30))
        dist = rng.uniform(380, 520)
        out.append(dist * np.array([np.cos(el) * np.sin(az), -np.sin(el), -np.cos(el) * np.cos(az)]))
    return out


def write_collection(folder: Path, obj: dict, centres: list[np.ndarray], rng) -> None:
    (folder / "images").mkdir(parents=True, exist_ok=True)
    (folder / "depth").mkdir(parents=True, exist_ok=True)
    annotations = []
    for i, centre in enumerate(centres):
        r, t = look_at(centre)
        low = rng.uniform(0, 255, size=(4, 4, 3)).astype(np.uint8)
        background = np.asarray(Image.fromarray(low).resize(SIZE[::-1], Image.BICUBIC), dtype=np.float64)
        image, depth = render_view(obj, r, t, background)
        name = f"{i:03d}"
        for stem in (name, f"downsampled_{name}"):
            Image.fromarray(image).save(folder / "images" / f"{stem}.jpg", "JPEG", quality=95, subsampling=0)
        raw = np.where(depth > 0, np.round(65535 * 10 / np.where(depth > 0, depth, 1)), 0).astype(np.uint16)
        Image.fromarray(raw).save(folder / "depth" / f"downsampled_{name}.png")
        annotations.append({"filename": f"{name}.jpg", "image_size": list(SIZE), "split": "train",
                            "camera": {"focal_length": FOCAL, "q": quaternion(r), "t": [float(v) for v in t]}})
    (folder / "annotations.json").write_text(json.dumps(annotations))


def write_objects(root: Path, cfg: Preset, seed: int) -> None:
    for k in range(cfg.objects):
        rng = np.random.default_rng([seed, k])
        obj = {"axes": rng.uniform(60, 100, size=3), "rotation": _random_rotation(rng), "texture": _texture(rng)}
        write_collection(root / f"object_{k:02d}" / "wild_set", obj, _views(rng, cfg.wild_views), rng)
        write_collection(root / f"object_{k:02d}" / "multiview_00", obj, _views(rng, cfg.multiview_views), rng)


def generate(out_dir, preset: str = "small", seed: int = 0, progress: bool = True) -> Path:
    """Write the ``preset`` data set under ``out_dir`` (once: harness.data.generated.write_once)."""
    if preset not in PRESETS:
        raise ConfigError(f"unknown NAVI SynthScenes preset {preset!r}; choose one of {', '.join(PRESETS)}")
    cfg = PRESETS[preset]
    meta = {"generator": GENERATOR, "preset": preset, "seed": seed, "version": VERSION, "layout": "navi",
            "objects": cfg.objects, "wild_views": cfg.wild_views, "multiview_views": cfg.multiview_views}
    return write_once(out_dir, meta, lambda tmp: write_objects(tmp, cfg, seed))
