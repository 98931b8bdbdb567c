"""SynthScenes clips for label propagation, in DAVIS-2017's layout (harness/data/davis.py): textured shapes
moving over a textured, slowly panning background, painted with the background's two colours
(texture, shape and motion set them apart, not colour), each object's instance mask a palette PNG.

    <root>/meta.json
    <root>/ImageSets/2017/val.txt
    <root>/JPEGImages/480p/<seq>/00000.jpg ...   128 x 64 frames
    <root>/Annotations/480p/<seq>/00000.png ...  0 background, k = object k (drawn in order k)

The textures and shapes are SynthScenes' own (harness.data.synthetic). Each sequence is drawn
from its own RNG seeded by (seed, sequence), so the bytes written do not depend on the order.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from harness.data import synthetic as ss
from harness.data.generated import write_once
from harness.errors import ConfigError

GENERATOR = "synthscenes-davis"
VERSION = 2   # 2: objects painted with the background's colours (presets "shared")
WIDTH, HEIGHT = 128, 64
CANVAS = 128   # textures and shapes are drawn on a square canvas, frames are its middle rows


@dataclass(frozen=True)
class ClipPreset:
    sequences: int
    frames: int
    max_objects: int
    # "distinct": each object's colour pair differs from the background's; "shared": objects
    # are painted with the background's two colours, so only shape, texture and motion tell
    # them apart (colour alone, what a random network's features carry best, does not)
    colours: str = "distinct"
    speed: float = 1.0   # scales the objects' velocities (pixels per frame, up to 3 x speed)


# "shared" colours: with distinct colours a random-init ViT (whose features carry colour and
# position) beat the SynthScenes-trained ones (small, seed 0: (J&F)m 43.7 random vs 32.1 DINO,
# 33.5 iBOT); with shared colours the self-supervised ones lead on seeds 0, 1, 2 (DINO / iBOT /
# random: 29.0 / 28.7 / 23.4, 21.0 / 22.5 / 17.4, 25.8 / 26.2 / 23.4; supervised ~ random)
PRESETS = {"tiny": ClipPreset(3, 6, 2, colours="shared"), "small": ClipPreset(6, 10, 3, colours="shared")}


def default_root(preset: str = "small", seed: int = 0) -> Path:
    home = Path(os.environ.get("SSL_BENCH_HOME", Path.home() / ".cache" / "ssl-bench"))
    return home / "data" / f"synthscenes-davis-{preset}-s{seed}-v{VERSION}"


def _object(rng, index: int, means: list, cfg: ClipPreset, background_colours):
    """Shape, texture, colours, radius, start, velocity and spin of one object."""
    shape = ss.SHAPES[int(rng.integers(len(ss.SHAPES)))]
    tex = ss.TEXTURES[int(rng.integers(len(ss.TEXTURES)))]
    a, b = ss._colour_pair(rng, means)
    means.append((a + b) / 2)
    if cfg.colours == "shared":
        a, b = background_colours
    weight = ss._THING_TEXTURES[tex](rng, CANVAS, CANVAS / 64.0 / 2)
    r = float(rng.uniform(9, 14))
    start = np.array([rng.uniform(20, WIDTH - 20), rng.uniform(CANVAS / 2 - 14, CANVAS / 2 + 14)])
    velocity = rng.uniform(-3.0, 3.0, size=2) * np.array([1.0, 0.5]) * cfg.speed
    return dict(shape=shape, weight=weight, colours=(a, b), r=r, start=start, velocity=velocity,
                theta=float(rng.uniform(0, np.pi)), spin=float(rng.uniform(-0.08, 0.08)))


def _background_colours(state, rng):
    """The two colours _draw_background drew (its first draw), replayed from the RNG state it
    started from, without moving ``rng``."""
    replay = np.random.Generator(type(rng.bit_generator)())
    replay.bit_generator.state = state
    return ss._colour_pair(replay, [])


def draw_clip(seed: int, index: int, cfg: ClipPreset) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """(frames (H, W, 3) uint8, labels (H, W) uint8) of clip ``index``."""
    rng = np.random.default_rng([seed, 77, index])
    stuff = [int(rng.integers(len(ss.STUFF_CLASSES)))]
    state = rng.bit_generator.state
    background, _, means = ss._draw_background(rng, CANVAS, stuff)
    colours = _background_colours(state, rng)
    pan = rng.uniform(-1.5, 1.5)
    objects = [_object(rng, k, list(means), cfg, colours) for k in range(int(rng.integers(1, cfg.max_objects + 1)))]
    top = (CANVAS - HEIGHT) // 2
    images, labels = [], []
    for t in range(cfg.frames):
        img = np.roll(background, int(round(pan * t)), axis=1).copy()
        label = np.zeros((CANVAS, CANVAS), np.uint8)
        for k, o in enumerate(objects, start=1):
            cx, cy = o["start"] + o["velocity"] * t
            where = ss._shape_mask(o["shape"], CANVAS, cx, cy, o["r"], o["theta"] + o["spin"] * t)
            shift = np.round(o["velocity"] * t).astype(int)
            weight = np.roll(o["weight"], (shift[1], shift[0]), axis=(0, 1))   # the texture moves with it
            ss._paint(img, where, weight, *o["colours"])
            label[where] = k
        images.append(np.clip(img[top:top + HEIGHT, :WIDTH], 0, 255).round().astype(np.uint8))
        labels.append(label[top:top + HEIGHT, :WIDTH])
    return images, labels


def _write(root: Path, cfg: ClipPreset, seed: int) -> None:
    names = [f"clip{i:02d}" for i in range(cfg.sequences)]
    for i, name in enumerate(names):
        images, labels = draw_clip(seed, i, cfg)
        (root / "JPEGImages" / "480p" / name).mkdir(parents=True)
        (root / "Annotations" / "480p" / name).mkdir(parents=True)
        for t, (img, lab) in enumerate(zip(images, labels)):
            ss._save_jpeg(img, root / "JPEGImages" / "480p" / name / f"{t:05d}.jpg")
            ss.save_palette_png(lab, root / "Annotations" / "480p" / name / f"{t:05d}.png")
    (root / "ImageSets" / "2017").mkdir(parents=True)
    (root / "ImageSets" / "2017" / "val.txt").write_text("".join(n + "\n" for n in names))


def generate(out_dir: Path, preset: str = "small", seed: int = 0, progress: bool = True) -> Path:
    """Write the clips of ``preset`` under ``out_dir`` (once: harness.data.generated.write_once)."""
    if preset not in PRESETS:
        raise ConfigError(f"unknown SynthScenes DAVIS preset {preset!r}; choose one of {', '.join(PRESETS)}")
    meta = {"generator": GENERATOR, "preset": preset, "seed": seed, "version": VERSION,
            "sequences": PRESETS[preset].sequences, "frames": PRESETS[preset].frames, "size": [WIDTH, HEIGHT]}
    return write_once(out_dir, meta, lambda tmp: _write(tmp, PRESETS[preset], seed))
