"""SynthScenes for linear transfer: three small sets whose classes differ from the pretraining
images' (SynthScenes objects and stuff), in published layouts the readers take:

- ``dtd/dtd``: 6 texture classes (stripes at two angles, checkerboards of two sizes, dots, rings),
  colours drawn at random so that only the texture tells the class; DTD's own train/val/test lists;
- ``oxford-iiit-pet``: 8 fine-grained classes (a disc or a square, with one of four inner textures),
  Pets' trainval/test annotation files (its validation is carved from trainval);
- ``VOCdevkit/VOC2007``: multi-label images with 1-3 objects of 20 classes (5 shapes x 4 fills) on a
  textured ground, the per-class ``<class>_<split>.txt`` files with 1 / -1, for 11-point mAP.

numpy and PIL only, seeded per image; 64 px images.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
from PIL import Image

from harness.data.generated import write_once
from harness.data.voc2007 import VOC_CLASSES
from harness.errors import ConfigError

VERSION = 1
GENERATOR = "synthscenes-transfer"
SIZE = 64
TEXTURES = ("stripes_0", "stripes_90", "checker_4", "checker_10", "dots", "rings")
PET_SHAPES, PET_TEXTURES = ("disc", "square"), ("stripes_0", "checker_4", "dots", "rings")
VOC_SHAPES = ("disc", "square", "triangle", "cross", "ring")


@dataclass(frozen=True)
class Preset:
    per_class: tuple[int, int, int]  # DTD: train, val, test images per class
    pets: tuple[int, int]  # Pets: trainval, test images per class (enough that the carved val holds every class)
    voc: tuple[int, int, int]  # train, val, test images of the multi-label set


PRESETS = {"tiny": Preset((8, 4, 6), (30, 6), (30, 20, 30)), "small": Preset((24, 8, 16), (50, 16), (90, 40, 80))}


def texture(kind: str, rng: np.random.Generator, size: int = SIZE) -> np.ndarray:
    """(size, size) in [0, 1]: the pattern of ``kind`` at a random phase and scale jitter."""
    v, u = np.mgrid[0:size, 0:size].astype(np.float64)
    phase, jitter = rng.uniform(0, 2 * np.pi), rng.uniform(0.85, 1.15)
    if kind.startswith("stripes"):
        a = np.deg2rad(float(kind.split("_")[1]) + rng.uniform(-10, 10))
        return 0.5 + 0.5 * np.sign(np.sin((u * np.cos(a) + v * np.sin(a)) * 2 * np.pi / (8 * jitter) + phase))
    if kind.startswith("checker"):
        p = float(kind.split("_")[1]) * jitter
        return ((np.floor(u / p + phase) + np.floor(v / p)) % 2).astype(np.float64)
    period = 10 * jitter
    du, dv = (u + phase * 3) % period - period / 2, (v + phase * 2) % period - period / 2
    r = np.hypot(du, dv)
    return (r < 2.5).astype(np.float64) if kind == "dots" else ((r > 2.0) & (r < 3.5)).astype(np.float64)


def _colourise(pattern: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    a, b = rng.uniform(20, 235, size=(2, 3))
    return pattern[..., None] * a + (1 - pattern[..., None]) * b


def shape_mask(kind: str, cx: float, cy: float, r: float, size: int = SIZE) -> np.ndarray:
    v, u = np.mgrid[0:size, 0:size].astype(np.float64) + 0.5
    x, y = u - cx, v - cy
    if kind == "disc":
        return np.hypot(x, y) <= r
    if kind == "ring":
        return (np.hypot(x, y) <= r) & (np.hypot(x, y) >= 0.55 * r)
    if kind == "square":
        return (np.abs(x) <= 0.8 * r) & (np.abs(y) <= 0.8 * r)
    if kind == "cross":
        return ((np.abs(x) <= 0.3 * r) | (np.abs(y) <= 0.3 * r)) & (np.abs(x) <= r) & (np.abs(y) <= r)
    return (y <= 0.7 * r) & (y >= -r + 1.7 * np.abs(x))  # triangle, apex up


def _save(img: np.ndarray, rng: np.random.Generator, path: Path) -> None:
    img = np.clip(img + rng.normal(0, 4, size=img.shape), 0, 255).astype(np.uint8)
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(img).save(path, "JPEG", quality=95)


def write_dtd(root: Path, cfg: Preset, seed: int) -> None:
    data = root / "dtd" / "dtd"
    for s, split in enumerate(("train", "val", "test")):
        lines = []
        for k, cls in enumerate(TEXTURES):
            for i in range(cfg.per_class[s]):
                rng = np.random.default_rng([seed, 1, s, k, i])
                rel = f"{cls}/{cls}_{split}_{i:04d}.jpg"
                _save(_colourise(texture(cls, rng), rng), rng, data / "images" / rel)
                lines.append(rel)
        (data / "labels").mkdir(parents=True, exist_ok=True)
        (data / "labels" / f"{split}1.txt").write_text("\n".join(lines) + "\n")


def write_pets(root: Path, cfg: Preset, seed: int) -> None:
    base = root / "oxford-iiit-pet"
    classes = [(s, t) for s in PET_SHAPES for t in PET_TEXTURES]
    counts = {"trainval": cfg.pets[0], "test": cfg.pets[1]}
    for s, split in enumerate(("trainval", "test")):
        lines = []
        for k, (shape, tex) in enumerate(classes):
            name = f"{shape}_{tex.replace('_', '')}"
            for i in range(counts[split]):
                rng = np.random.default_rng([seed, 2, s, k, i])
                img = _colourise(texture(PET_TEXTURES[int(rng.integers(4))], rng), rng) * 0.5
                mask = shape_mask(shape, *rng.uniform(24, 40, size=2), rng.uniform(14, 20))
                img[mask] = _colourise(texture(tex, rng), rng)[mask]
                image_id = f"{name}_{s}{i:04d}"
                _save(img, rng, base / "images" / f"{image_id}.jpg")
                lines.append(f"{image_id} {k + 1} {1 + k // 4} {i + 1}")
        (base / "annotations").mkdir(parents=True, exist_ok=True)
        (base / "annotations" / f"{split}.txt").write_text("\n".join(lines) + "\n")


def write_voc(root: Path, cfg: Preset, seed: int) -> None:
    """20 classes = 5 shapes x 4 fills; image i's first object is class i mod 20 (each class occurs in
    every split), then 0-2 more drawn at random."""
    voc = root / "VOCdevkit" / "VOC2007"
    main = voc / "ImageSets" / "Main"
    main.mkdir(parents=True, exist_ok=True)
    for s, split in enumerate(("train", "val", "test")):
        present = np.full((cfg.voc[s], len(VOC_CLASSES)), -1)
        ids = []
        for i in range(cfg.voc[s]):
            rng = np.random.default_rng([seed, 3, s, i])
            img = _colourise(texture(TEXTURES[int(rng.integers(len(TEXTURES)))], rng), rng) * 0.3 + 40
            extra = rng.choice(len(VOC_CLASSES), size=int(rng.integers(0, 3)), replace=False)
            for k in dict.fromkeys([i % len(VOC_CLASSES), *extra.tolist()]):
                mask = shape_mask(VOC_SHAPES[k // 4], *rng.uniform(14, 50, size=2), rng.uniform(9, 14))
                fill = np.ones((SIZE, SIZE)) if k % 4 == 0 else texture(PET_TEXTURES[k % 4 - 1], rng)
                img[mask] = (fill[..., None] * rng.uniform(150, 255, size=3) + 30)[mask]
                present[i, k] = 1
            image_id = f"{s}{i:05d}"
            _save(img, rng, voc / "JPEGImages" / f"{image_id}.jpg")
            ids.append(image_id)
        for k, cls in enumerate(VOC_CLASSES):
            (main / f"{cls}_{split}.txt").write_text("".join(f"{i} {present[n, k]:2d}\n" for n, i in enumerate(ids)))


def generate(out_dir, preset: str = "small", seed: int = 0, progress: bool = True) -> Path:
    """Write the three sets under ``out_dir`` (once: harness.data.generated.write_once); each
    reader takes ``out_dir`` as its data root."""
    if preset not in PRESETS:
        raise ConfigError(f"unknown transfer SynthScenes preset {preset!r}; choose one of {', '.join(PRESETS)}")
    cfg = PRESETS[preset]
    meta = {"generator": GENERATOR, "preset": preset, "seed": seed, "version": VERSION,
            "layouts": ["dtd", "pets", "voc2007"], "size": SIZE}

    def write(tmp: Path) -> None:
        write_dtd(tmp, cfg, seed)
        write_pets(tmp, cfg, seed)
        write_voc(tmp, cfg, seed)

    return write_once(out_dir, meta, write)
