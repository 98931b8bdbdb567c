"""Correspondence SynthScenes: pairs of a textured object and a rotated, rescaled, shifted view of
it, with keypoints known exactly, written in SPair-71k's layout (PairAnnotation/test,
ImageAnnotation, JPEGImages, Segmentation, Layout/large/test.txt).

Each category is a shape (disc, square, triangle) with its own keypoints (points fixed in the
shape's frame) and its own texture kind (rings, checks, stripes) in random colours, on a smooth
random background. The target is the source warped by a similarity: the rotation sets the
viewpoint bin (0: under 10 degrees, 1: 20-40, 2: 50-80), the scale is 0.8-1.25. A keypoint
warped out of the target, or hidden at random (one in ten), is null, so that only keypoints
visible in both images count, as in SPair. numpy and PIL only, seeded per pair.
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
GENERATOR = "synthscenes-correspondence"
CATEGORIES = ("disc", "square", "triangle")
ROTATION = {0: (0.0, 10.0), 1: (20.0, 40.0), 2: (50.0, 80.0)}
# keypoints in the shape's frame (unit radius): eight points that no symmetry of the texture maps
# onto each other once the texture's colours are drawn
KEYPOINTS = {
    "disc": [(np.cos(a) * r, np.sin(a) * r) for a, r in zip(np.linspace(0, 2 * np.pi, 8, endpoint=False),
                                                           (0.3, 0.8, 0.5, 0.8, 0.3, 0.8, 0.5, 0.8))],
    "square": [(-0.8, -0.8), (0.8, -0.8), (0.8, 0.8), (-0.8, 0.8), (0.0, -0.5), (0.5, 0.0), (0.0, 0.5), (0.0, 0.0)],
    "triangle": [(0.0, -0.9), (0.78, 0.45), (-0.78, 0.45), (0.39, -0.22), (0.0, 0.45), (-0.39, -0.22),
                 (0.0, 0.0), (0.2, 0.2)],
}


@dataclass(frozen=True)
class Preset:
    pairs_per_category: int
    min_side: int = 80
    max_side: int = 120


PRESETS = {"tiny": Preset(6), "small": Preset(40)}


def _smooth_noise(rng, h: int, w: int, cells: int = 4) -> np.ndarray:
    low = rng.uniform(0, 255, size=(cells, cells, 3)).astype(np.uint8)
    return np.asarray(Image.fromarray(low).resize((w, h), Image.BICUBIC), dtype=np.float64)


def _object(rng, category: str, h: int, w: int, cx: float, cy: float, r: float, theta: float):
    """(mask, texture) of the category's shape centred at (cx, cy), radius r, turned by theta."""
    v, u = np.mgrid[0:h, 0:w].astype(np.float64) + 0.5
    x, y = (u - cx) / r, (v - cy) / r
    xr, yr = x * np.cos(theta) + y * np.sin(theta), -x * np.sin(theta) + y * np.cos(theta)
    if category == "disc":
        mask, pattern = xr ** 2 + yr ** 2 <= 1, (np.floor(np.hypot(xr, yr) * 4) + (xr > 0)) % 3
    elif category == "square":
        mask, pattern = (np.abs(xr) <= 0.9) & (np.abs(yr) <= 0.9), (np.floor(xr * 2.5) + 2 * np.floor(yr * 2.5)) % 3
    else:
        mask = np.ones((h, w), bool)
        for k in range(3):
            a = -np.pi / 2 + k * 2 * np.pi / 3
            mask &= xr * np.cos(a) + yr * np.sin(a) >= -0.5
        pattern = (np.floor((xr + 2 * yr) * 3) + (yr > 0)) % 3
    colours = rng.uniform(30, 255, size=(3, 3))
    return mask, colours[pattern.astype(int)]


def _keypoints(category: str, cx: float, cy: float, r: float, theta: float) -> np.ndarray:
    c, s = np.cos(theta), np.sin(theta)
    pts = np.array(KEYPOINTS[category])
    # inverse of the frame rotation used in _object: image = centre + r * R(-theta) frame
    return np.stack([cx + r * (pts[:, 0] * c - pts[:, 1] * s), cy + r * (pts[:, 0] * s + pts[:, 1] * c)], 1)


def _warp(img: np.ndarray, mask: np.ndarray, a: np.ndarray, size: tuple[int, int], fill) -> tuple:
    """The image and mask under x' = a @ [x, y, 1] (pixel centres), on a (w, h) canvas."""
    full = np.vstack([a, [0, 0, 1]])
    inv = np.linalg.inv(full)
    # PIL's AFFINE takes the inverse map on pixel corners; pixel centres shift by 0.5 on both sides
    shift = np.array([[1, 0, 0.5], [0, 1, 0.5], [0, 0, 1]])
    m = np.linalg.inv(shift) @ inv @ shift
    coeffs = tuple(m[:2].ravel())
    out = Image.fromarray(img).transform(size, Image.AFFINE, coeffs, resample=Image.BICUBIC, fillcolor=fill)
    warped_mask = Image.fromarray(mask.astype(np.uint8) * 255).transform(size, Image.AFFINE, coeffs,
                                                                          resample=Image.NEAREST)
    return np.asarray(out), np.asarray(warped_mask) > 127


def _box(mask: np.ndarray) -> list[int]:
    ys, xs = np.nonzero(mask)
    return [int(xs.min()), int(ys.min()), int(xs.max()) + 1, int(ys.max()) + 1]


def render_pair(rng, category: str, viewpoint: int, cfg: Preset) -> dict:
    """Source and target images, masks, keypoints (nan: not visible) and boxes of one pair."""
    h, w = (int(v) for v in rng.integers(cfg.min_side, cfg.max_side + 1, size=2))
    r = rng.uniform(0.25, 0.35) * min(h, w)
    cx, cy, theta = rng.uniform(r + 2, w - r - 2), rng.uniform(r + 2, h - r - 2), rng.uniform(0, 2 * np.pi)
    mask, texture = _object(rng, category, h, w, cx, cy, r, theta)
    texture = 0.5 * texture + 0.5 * _smooth_noise(rng, h, w, cells=3)  # a colour drift: no two places alike
    img = np.where(mask[..., None], texture, _smooth_noise(rng, h, w)) + rng.normal(0, 4, size=(h, w, 3))
    src = np.clip(img, 0, 255).astype(np.uint8)
    kps_src = _keypoints(category, cx, cy, r, theta)
    lo, hi = ROTATION[viewpoint]
    angle = np.deg2rad(rng.uniform(lo, hi) * rng.choice([-1, 1]))
    scale = rng.uniform(0.8, 1.25)
    th, tw = (int(v) for v in rng.integers(cfg.min_side, cfg.max_side + 1, size=2))
    rot = scale * np.array([[np.cos(angle), -np.sin(angle)], [np.sin(angle), np.cos(angle)]])
    t = np.array([tw / 2, th / 2]) + rng.uniform(-0.1, 0.1, size=2) * (tw, th) - rot @ (cx, cy)
    a = np.hstack([rot, t[:, None]])
    fill = tuple(int(v) for v in rng.uniform(60, 200, size=3))
    trg, trg_mask = _warp(src, mask, a, (tw, th), fill)
    kps_trg = kps_src @ rot.T + t
    out_of_frame = (kps_trg[:, 0] < 0) | (kps_trg[:, 0] >= tw) | (kps_trg[:, 1] < 0) | (kps_trg[:, 1] >= th)
    kps_trg[out_of_frame] = np.nan
    kps_src[rng.uniform(size=len(kps_src)) < 0.1] = np.nan
    kps_trg[rng.uniform(size=len(kps_trg)) < 0.1] = np.nan
    return {"src": src, "trg": trg, "src_mask": mask, "trg_mask": trg_mask, "src_kps": kps_src, "trg_kps": kps_trg}


def _kps_json(kps: np.ndarray) -> dict:
    return {str(i): (None if np.isnan(xy).any() else [int(round(xy[0])), int(round(xy[1]))])
            for i, xy in enumerate(kps)}


def _write_image(root: Path, category: str, name: str, img: np.ndarray, mask: np.ndarray, kps: np.ndarray,
                 class_id: int) -> list[int]:
    for sub in ("JPEGImages", "ImageAnnotation", "Segmentation"):
        (root / sub / category).mkdir(parents=True, exist_ok=True)
    Image.fromarray(img).save(root / "JPEGImages" / category / f"{name}.jpg", "JPEG", quality=95, subsampling=0)
    Image.fromarray((mask * class_id).astype(np.uint8)).save(root / "Segmentation" / category / f"{name}.png")
    box = _box(mask)
    ann = {"filename": f"{name}.jpg", "category": category, "image_width": int(img.shape[1]),
           "image_height": int(img.shape[0]), "image_depth": 3, "bndbox": box, "kps": _kps_json(kps)}
    (root / "ImageAnnotation" / category / f"{name}.json").write_text(json.dumps(ann))
    return box


def write_pairs(root: Path, cfg: Preset, seed: int, categories=CATEGORIES, shapes=CATEGORIES) -> list[str]:
    """Write the test pairs of every category; ``categories`` name the folders (``shapes``: the
    shape drawn for each). Returns the pair names."""
    names, n = [], 0
    folder = root / "PairAnnotation" / "test"
    folder.mkdir(parents=True, exist_ok=True)
    for k, (category, shape) in enumerate(zip(categories, shapes)):
        for i in range(cfg.pairs_per_category):
            vp = i % 3
            p = render_pair(np.random.default_rng([seed, k, i]), shape, vp, cfg)
            src, trg = f"{k:02d}{i:04d}_0", f"{k:02d}{i:04d}_1"
            src_box = _write_image(root, category, src, p["src"], p["src_mask"], p["src_kps"], k + 1)
            trg_box = _write_image(root, category, trg, p["trg"], p["trg_mask"], p["trg_kps"], k + 1)
            n += 1
            name = f"{n:06d}-{src}-{trg}:{category}"
            both = [j for j in range(len(p["src_kps"]))
                    if not (np.isnan(p["src_kps"][j]).any() or np.isnan(p["trg_kps"][j]).any())]
            ann = {"filename": name, "src_imname": f"{src}.jpg", "trg_imname": f"{trg}.jpg", "category": category,
                   "src_imsize": [int(p["src"].shape[1]), int(p["src"].shape[0]), 3],
                   "trg_imsize": [int(p["trg"].shape[1]), int(p["trg"].shape[0]), 3],
                   "src_bndbox": src_box, "trg_bndbox": trg_box, "viewpoint_variation": vp, "scale_variation": 0,
                   "truncation": 0, "occlusion": 0, "mirror": 0, "kps_ids": both,
                   "src_kps": [_kps_json(p["src_kps"])[str(j)] for j in both],
                   "trg_kps": [_kps_json(p["trg_kps"])[str(j)] for j in both]}
            (folder / f"{name}.json").write_text(json.dumps(ann))
            names.append(name)
    (root / "Layout" / "large").mkdir(parents=True, exist_ok=True)
    (root / "Layout" / "large" / "test.txt").write_text("\n".join(names) + "\n")
    return names


def generate(out_dir, preset: str = "small", seed: int = 0, progress: bool = True) -> Path:
    """Write the ``preset`` data set under ``out_dir`` (once: harness.data.generated.write_once)."""
    if preset not in PRESETS:
        raise ConfigError(f"unknown correspondence SynthScenes preset {preset!r}; choose one of {', '.join(PRESETS)}")
    cfg = PRESETS[preset]
    meta = {"generator": GENERATOR, "preset": preset, "seed": seed, "version": VERSION, "layout": "spair71k",
            "categories": list(CATEGORIES), "pairs_per_category": cfg.pairs_per_category}
    return write_once(out_dir, meta, lambda tmp: write_pairs(tmp, cfg, seed) and None)
