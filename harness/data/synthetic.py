"""SynthScenes: a procedural stand-in for VOC / ADE20K / ImageNet / caption data.

Nothing can be downloaded on the machines this harness targets, so this module draws
a dataset whose classes are defined by SHAPE x TEXTURE (never colour: every colour is
drawn at random per object, independently of the class) and writes it in the real
datasets' on-disk layouts, so that the real readers are what gets exercised:

    <root>/meta.json                      what was generated (preset, seed, classes, counts)
    <root>/pretrain.txt                   root-relative images for pretraining (train only)
    <root>/scenes.jsonl                   per-scene ground truth (classes placed, visible px)
    <root>/VOC2012/...                    JPEGImages, SegmentationClass (palette PNG),
                                          SegmentationClassAug (grayscale), ImageSets
    <root>/ADEChallengeData2016/...       images/, annotations/ (0 = other, k = label + 1)
    <root>/imagenet/{train,val}/<class>/  object-centric images, one object each
    <root>/captions/                      images/ + captions.jsonl (multi-positive groups)

Every image is drawn from its own RNG seeded by (seed, part, index), so the output is
identical whatever the order or process that renders it.
"""
from __future__ import annotations

import colorsys
import dataclasses
import json
import os
import shutil
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np
from PIL import Image

from harness.errors import ConfigError, DataError
from harness.io_utils import link_or_copy

# Bump when the drawing changes: an existing dataset with another version is not reused.
GENERATOR_VERSION = 2

SHAPES = ("disc", "square", "triangle", "cross")
TEXTURES = ("striped", "checkered", "dotted")
STUFF_CLASSES = ("noise", "waves", "grid", "wood")
# Thing k has shape k // 3 and texture k % 3.
THING_CLASSES = tuple(f"{t}_{s}" for s in SHAPES for t in TEXTURES)
# One label space for the segmentation layouts: stuff first, then things.
SEG_CLASSES = STUFF_CLASSES + THING_CLASSES
NUM_STUFF = len(STUFF_CLASSES)

_STUFF_PHRASE = {"noise": "noise", "waves": "waves", "grid": "a grid", "wood": "wood grain"}

# Parts of the dataset; each seeds its own RNG stream so parts never shift each other.
_PART_SCENE = {"train": 1, "val": 2}
_PART_OBJECT = {"train": 3, "val": 4}
_PART_CAPTION_SPECS = 5
_PART_CAPTION_RENDER = 6

JPEG_QUALITY = 95
STUFF_CONTRAST = 0.5
# HSV ranges of the random colours: a dark and a light one per texture.
_SATURATION = (0.1, 0.35)
_DARK_VALUE = (0.15, 0.45)
_LIGHT_VALUE = (0.65, 1.0)


@dataclass(frozen=True)
class SynthPreset:
    name: str
    image_size: int
    scene_train: int
    scene_val: int
    object_train: int          # object-centric images; multiples of 12 keep classes balanced
    object_val: int
    caption_groups: int
    renders_per_caption: int = 4
    max_objects: int = 4        # per scene
    max_caption_objects: int = 3

    def __post_init__(self):
        n = len(THING_CLASSES)
        if self.object_train % n or self.object_val % n:
            raise ValueError(f"preset {self.name}: object-centric counts must be multiples of {n}")


PRESETS: dict[str, SynthPreset] = {
    "tiny": SynthPreset("tiny", 64, scene_train=24, scene_val=12, object_train=24, object_val=12,
                        caption_groups=6),
    "small": SynthPreset("small", 64, scene_train=2000, scene_val=400, object_train=2400,
                         object_val=480, caption_groups=400),
    "medium": SynthPreset("medium", 128, scene_train=6000, scene_val=1200, object_train=6000,
                          object_val=1200, caption_groups=1000),
}


def default_root(preset: str = "small", seed: int = 0) -> Path:
    """Cache location used when the user names no data root."""
    home = Path(os.environ.get("SSL_BENCH_HOME", Path.home() / ".cache" / "ssl-bench"))
    # The generator version is in the name: a new version never collides with an old cache.
    return home / "data" / f"synthscenes-{preset}-s{seed}-v{GENERATOR_VERSION}"


# ============================================================================ drawing
@lru_cache(maxsize=4)
def _coords(size: int) -> tuple[np.ndarray, np.ndarray]:
    # Pixel centres, so that shapes are symmetric about their centre.
    c = np.arange(size, dtype=np.float32) + 0.5
    yy, xx = np.meshgrid(c, c, indexing="ij")
    return yy, xx


def _rotated(size: int, theta: float, cx: float = 0.0, cy: float = 0.0):
    yy, xx = _coords(size)
    dx, dy = xx - cx, yy - cy
    c, s = np.float32(np.cos(theta)), np.float32(np.sin(theta))
    return dx * c + dy * s, -dx * s + dy * c


# --- textures: each returns a float32 weight map in [0, 1] that mixes two colours.
# Periods are given for 64 px images and scale with the image size. Thing textures have
# periods of 7-10 px: about one period per patch of size/8, coarse enough to survive the
# crop-and-resize of pretraining (finer ones alias into noise at 64 px).
def _tex_striped(rng, size, u):
    x, _ = _rotated(size, rng.uniform(0, np.pi))
    period = rng.uniform(7.0, 9.0) * u
    return (((x / period + rng.uniform()) % 1.0) < 0.5).astype(np.float32)


def _tex_checkered(rng, size, u):
    x, y = _rotated(size, rng.uniform(0, np.pi / 2))
    cell = rng.uniform(4.0, 5.0) * u
    parity = np.floor(x / cell + rng.uniform()) + np.floor(y / cell + rng.uniform())
    return (parity % 2).astype(np.float32)


def _tex_dotted(rng, size, u):
    x, y = _rotated(size, rng.uniform(0, np.pi / 2))
    period = rng.uniform(8.0, 10.0) * u
    fx = (x / period + rng.uniform()) % 1.0 - 0.5
    fy = (y / period + rng.uniform()) % 1.0 - 0.5
    return ((fx * fx + fy * fy) < 0.3 ** 2).astype(np.float32)


def _tex_noise(rng, size, u):
    # Blotches from upsampled coarse noise, plus grain: irregular, unlike every other class.
    coarse = max(3, int(round(size / (7.0 * u))))
    low = rng.uniform(size=(coarse, coarse)).astype(np.float32)
    up = np.asarray(Image.fromarray(low).resize((size, size), Image.BILINEAR))
    grain = rng.uniform(-0.25, 0.25, size=(size, size)).astype(np.float32)
    return np.clip((up - 0.5) * 3.0 + 0.5 + grain, 0.0, 1.0)


def _tex_waves(rng, size, u):
    # Smooth (sinusoidal, not binary) and bent: tells it apart from stripes.
    x, y = _rotated(size, rng.uniform(0, np.pi))
    period = rng.uniform(7.0, 10.0) * u
    bend = rng.uniform(1.0, 2.5)
    bend_period = rng.uniform(14.0, 24.0) * u
    phase = 2 * np.pi * x / period + bend * np.sin(2 * np.pi * y / bend_period + rng.uniform(0, 6.3))
    return (0.5 + 0.5 * np.sin(phase)).astype(np.float32)


def _tex_grid(rng, size, u):
    x, y = _rotated(size, rng.uniform(0, np.pi / 2))
    period = rng.uniform(8.0, 11.0) * u
    width = 1.6 * u / period
    fx = (x / period + rng.uniform()) % 1.0
    fy = (y / period + rng.uniform()) % 1.0
    return ((fx < width) | (fy < width)).astype(np.float32)


def _tex_wood(rng, size, u):
    # Sawtooth rings around a centre that may lie outside the image, with a wobble.
    cx, cy = rng.uniform(-0.5, 1.5, size=2) * size
    x, y = _rotated(size, rng.uniform(0, np.pi), cx, cy)
    d = np.sqrt(x * x + (1.8 * y) ** 2)
    period = rng.uniform(5.0, 8.0) * u
    wobble = 0.25 * np.sin(2 * np.pi * y / (rng.uniform(12, 20) * u))
    return ((d / period + wobble) % 1.0).astype(np.float32)


_THING_TEXTURES = {"striped": _tex_striped, "checkered": _tex_checkered, "dotted": _tex_dotted}
_STUFF_TEXTURES = {"noise": _tex_noise, "waves": _tex_waves, "grid": _tex_grid, "wood": _tex_wood}


# --- shapes: boolean masks. r is the radius of the disc of comparable area.
def _shape_mask(shape: str, size: int, cx: float, cy: float, r: float, theta: float) -> np.ndarray:
    x, y = _rotated(size, theta, cx, cy)
    if shape == "disc":
        return x * x + y * y <= r * r
    if shape == "square":
        return np.maximum(np.abs(x), np.abs(y)) <= 0.86 * r
    if shape == "triangle":
        inner = 0.72 * r  # inradius; area about that of the square
        mask = np.ones((size, size), dtype=bool)
        for k in range(3):
            a = np.pi / 2 + 2 * np.pi * k / 3
            mask &= x * np.float32(np.cos(a)) + y * np.float32(np.sin(a)) <= inner
        return mask
    if shape == "cross":
        w, length = 0.36 * r, 1.05 * r
        ax, ay = np.abs(x), np.abs(y)
        return ((ax <= w) & (ay <= length)) | ((ay <= w) & (ax <= length))
    raise ValueError(f"unknown shape {shape!r}")


def _random_colour(rng, value_range) -> np.ndarray:
    h, sat, val = rng.uniform(), rng.uniform(*_SATURATION), rng.uniform(*value_range)
    return np.array(colorsys.hsv_to_rgb(h, sat, val), dtype=np.float32) * 255.0


def _colour_pair(rng, avoid: list[np.ndarray] = ()) -> tuple[np.ndarray, np.ndarray]:
    """A dark and a light colour of random hues (in random order), whose mean differs from
    the ``avoid`` means (an object stays visible on its background). Luminance carries the
    texture; moderate saturation keeps colour from swamping it. The rule is the same for
    every class, so colour carries no class."""
    a = b = None
    for _ in range(50):
        a, b = _random_colour(rng, _DARK_VALUE), _random_colour(rng, _LIGHT_VALUE)
        if rng.uniform() < 0.5:
            a, b = b, a
        mean = (a + b) / 2
        if all(np.linalg.norm(mean - m) >= 40 for m in avoid):
            break
    return a, b


def _paint(img: np.ndarray, where: np.ndarray | None, weight: np.ndarray, a, b) -> None:
    if where is None:
        img[...] = a + (b - a) * weight[..., None]
    else:
        # Mix only the covered pixels: most of an object's frame is outside it.
        img[where] = a + (b - a) * weight[where][:, None]


@dataclass
class DrawnImage:
    image: np.ndarray                 # (S, S, 3) uint8
    label: np.ndarray                 # (S, S) uint8, SEG_CLASSES index per pixel
    objects: list[dict]               # in drawing order; visible pixels after occlusion
    background: list[str]


def _draw_background(rng, size, stuff: list[int]):
    u = size / 64.0
    img = np.empty((size, size, 3), dtype=np.float32)
    label = np.empty((size, size), dtype=np.uint8)
    means = []
    if len(stuff) == 1:
        regions = [None]
    else:
        # Two regions split by a line through a point near the centre; retry until both
        # regions are big enough to be learnable stuff rather than a sliver.
        for _ in range(20):
            px, py = (0.5 + rng.uniform(-0.2, 0.2, size=2)) * size
            x, _ = _rotated(size, rng.uniform(0, 2 * np.pi), px, py)
            split = x < 0
            if 0.2 <= split.mean() <= 0.8:
                break
        regions = [split, ~split]
    for region, cls in zip(regions, stuff):
        a, b = _colour_pair(rng, means)
        means.append((a + b) / 2)
        weight = _STUFF_TEXTURES[STUFF_CLASSES[cls]](rng, size, u)
        # Half the contrast of the things: objects stand out from their background.
        _paint(img, region, 0.5 + (weight - 0.5) * STUFF_CONTRAST, a, b)
        if region is None:
            label[...] = cls
        else:
            label[region] = cls
    return img, label, means


def _place(rng, size, things, radius_range, centre_jitter=None, min_visible=0.4, tries=30):
    """Pick positions/sizes/rotations so every object keeps ``min_visible`` of its pixels."""
    best = None
    for _ in range(tries):
        specs, masks = [], []
        for t in things:
            r = rng.uniform(*radius_range)
            if centre_jitter is None:
                cx, cy = rng.uniform(0.75 * r, size - 0.75 * r, size=2)
            else:
                cx, cy = size / 2 + rng.uniform(-centre_jitter, centre_jitter, size=2)
            theta = rng.uniform(0, 2 * np.pi)
            specs.append((t, cx, cy, r, theta))
            masks.append(_shape_mask(SHAPES[t // 3], size, cx, cy, r, theta))
        # Painter's order: a pixel belongs to the last object covering it.
        owner = np.full((size, size), -1, dtype=np.int16)
        for i, m in enumerate(masks):
            owner[m] = i
        visible = [(owner == i) for i in range(len(masks))]
        worst = min(v.sum() / max(m.sum(), 1) for v, m in zip(visible, masks))
        if best is None or worst > best[0]:
            best = (worst, specs, masks, visible)
        if worst >= min_visible:
            break
    return best[1], best[2], best[3]


def _draw(rng, size, things: list[int], stuff: list[int], radius_range, centre_jitter=None) -> DrawnImage:
    u = size / 64.0
    img, label, bg_means = _draw_background(rng, size, stuff)
    specs, masks, visible = _place(rng, size, things, radius_range, centre_jitter)
    objects = []
    for (t, *_), mask in zip(specs, masks):
        a, b = _colour_pair(rng, bg_means)
        _paint(img, mask, _THING_TEXTURES[TEXTURES[t % 3]](rng, size, u), a, b)
        label[mask] = NUM_STUFF + t
    for (t, *_), vis in zip(specs, visible):
        ys, xs = np.nonzero(vis)
        bbox = [int(xs.min()), int(ys.min()), int(xs.max()) + 1, int(ys.max()) + 1] if len(xs) else None
        objects.append({"class": THING_CLASSES[t], "label": NUM_STUFF + t,
                        "visible_px": int(vis.sum()), "bbox": bbox})
    # Mild sensor noise so that flat colour areas are not trivially compressible/matchable.
    img += rng.normal(0.0, 3.0, size=img.shape).astype(np.float32)
    image = np.clip(np.rint(img), 0, 255).astype(np.uint8)
    return DrawnImage(image, label, objects, [STUFF_CLASSES[s] for s in stuff])


def _scene_radius_range(size: int, n_objects: int) -> tuple[float, float]:
    # Diameter 16-40 px at 64 px for one object, shrinking as the scene gets crowded.
    u = size / 64.0
    d_max = max(22.0, 40.0 - 6.0 * (n_objects - 1))
    return 8.0 * u, d_max / 2 * u


def draw_scene(seed: int, split: str, index: int, size: int, max_objects: int = 4) -> DrawnImage:
    """Scene ``index`` of ``split``: 1..max_objects distinct things on one or two stuffs."""
    rng = np.random.default_rng([seed, _PART_SCENE[split], index])
    n = int(rng.integers(1, max_objects + 1))
    things = [int(t) for t in rng.choice(len(THING_CLASSES), size=n, replace=False)]
    stuff = [int(s) for s in rng.choice(NUM_STUFF, size=int(rng.integers(1, 3)), replace=False)]
    return _draw(rng, size, things, stuff, _scene_radius_range(size, n))


def object_class(split: str, index: int) -> int:
    """Class of object-centric image ``index``: round-robin, so splits are exactly balanced."""
    return index % len(THING_CLASSES)


def draw_object(seed: int, split: str, index: int, size: int) -> DrawnImage:
    """Object-centric image: one large, roughly centred object on one stuff background."""
    rng = np.random.default_rng([seed, _PART_OBJECT[split], index])
    stuff = [int(rng.integers(NUM_STUFF))]
    return _draw(rng, size, [object_class(split, index)], stuff,
                 radius_range=(0.30 * size, 0.40 * size), centre_jitter=0.08 * size)


def caption_text(things: list[int], stuff: list[int]) -> str:
    names = [f"a {TEXTURES[t % 3]} {SHAPES[t // 3]}" for t in things]
    objs = names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]
    return f"{objs} on {' and '.join(_STUFF_PHRASE[STUFF_CLASSES[s]] for s in stuff)}"


def caption_specs(seed: int, count: int, max_objects: int = 3) -> list[tuple[list[int], list[int]]]:
    """``count`` distinct scene descriptions (sorted classes, so a caption names a set).

    Distinct because two groups with the same caption would be false negatives for a
    multi-positive contrastive loss."""
    rng = np.random.default_rng([seed, _PART_CAPTION_SPECS])
    seen, specs = set(), []
    while len(specs) < count:
        n = int(rng.integers(1, max_objects + 1))
        things = sorted(int(t) for t in rng.choice(len(THING_CLASSES), size=n, replace=False))
        stuff = sorted(int(s) for s in rng.choice(NUM_STUFF, size=int(rng.integers(1, 3)), replace=False))
        key = (tuple(things), tuple(stuff))
        if key not in seen:
            seen.add(key)
            specs.append((things, stuff))
    return specs


def draw_caption_render(seed: int, group: int, render: int, things, stuff, size: int) -> DrawnImage:
    """One rendering of a caption: same classes, new layout, sizes, colours and drawing order."""
    rng = np.random.default_rng([seed, _PART_CAPTION_RENDER, group, render])
    order = [things[i] for i in rng.permutation(len(things))]
    stuff_order = [stuff[i] for i in rng.permutation(len(stuff))]
    return _draw(rng, size, order, stuff_order, _scene_radius_range(size, len(things)))


# ============================================================================ writing
def voc_palette() -> list[int]:
    """The Pascal VOC colour map (bit-interleaved), flattened for PIL putpalette."""
    palette = []
    for i in range(256):
        r = g = b = 0
        c = i
        for j in range(8):
            r |= ((c >> 0) & 1) << (7 - j)
            g |= ((c >> 1) & 1) << (7 - j)
            b |= ((c >> 2) & 1) << (7 - j)
            c >>= 3
        palette += [r, g, b]
    return palette


_PALETTE = voc_palette()


def _save_jpeg(image: np.ndarray, path: Path) -> None:
    # 4:4:4 chroma: the default 4:2:0 halves colour resolution and smears fine colour
    # textures (measured on generator v1: mean error 15 grey levels instead of 3 at q95).
    Image.fromarray(image).save(path, "JPEG", quality=JPEG_QUALITY, subsampling=0)


def save_palette_png(label: np.ndarray, path: Path) -> None:
    im = Image.fromarray(label)
    im.putpalette(_PALETTE)  # turns the 'L' image into a 'P' image with VOC colours
    im.save(path, "PNG")


def save_gray_png(label: np.ndarray, path: Path) -> None:
    Image.fromarray(label).save(path, "PNG")


def _meta_matches(meta_path: Path, preset: str, seed: int) -> bool:
    try:
        meta = json.loads(meta_path.read_text())
    except (OSError, ValueError):
        return False
    return (meta.get("generator") == "synthscenes" and meta.get("preset") == preset
            and meta.get("seed") == seed and meta.get("version") == GENERATOR_VERSION)


def _remove_stale_temp_dirs(out_dir: Path) -> None:
    """Delete temp dirs left by killed runs (their pid is gone), never a live run's."""
    for tmp in out_dir.parent.glob(f".{out_dir.name}.tmp-*"):
        try:
            pid = int(tmp.name.rsplit("-", 1)[1])
            os.kill(pid, 0)
            continue  # still running (or not ours to judge): leave it
        except ProcessLookupError:
            shutil.rmtree(tmp, ignore_errors=True)
        except (ValueError, PermissionError):
            continue


def generate(out_dir: Path, preset: str = "small", seed: int = 0, progress: bool = True,
             workers: int | None = None) -> Path:
    """Write SynthScenes ``preset`` with ``seed`` under ``out_dir`` and return ``out_dir``.

    Idempotent: returns at once if ``out_dir/meta.json`` records the same preset, seed
    and generator version. Writes into a sibling temp dir renamed into place at the end,
    so an interrupted run never leaves a half-written dataset at ``out_dir``.
    ``workers`` processes render in parallel (default: up to 2 of the usable CPUs); the
    bytes written do not depend on it.
    """
    if preset not in PRESETS:
        raise ConfigError(f"unknown SynthScenes preset {preset!r}; choose one of {', '.join(PRESETS)}")
    cfg = PRESETS[preset]
    out_dir = Path(out_dir).expanduser().resolve()
    if (out_dir / "meta.json").is_file():
        if _meta_matches(out_dir / "meta.json", preset, seed):
            return out_dir
        raise DataError(
            f"{out_dir} already holds a different SynthScenes dataset (see its meta.json; wanted "
            f"preset={preset!r} seed={seed} version={GENERATOR_VERSION}); delete it or choose "
            f"another --out")
    if out_dir.exists() and any(out_dir.iterdir()):
        raise DataError(f"{out_dir} exists, is not empty and has no SynthScenes meta.json; "
                        f"refusing to write into it (choose an empty or new --out directory)")
    if workers is None:
        workers = min(2, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
                      else (os.cpu_count() or 1))

    out_dir.parent.mkdir(parents=True, exist_ok=True)
    _remove_stale_temp_dirs(out_dir)
    tmp = out_dir.parent / f".{out_dir.name}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        _write_all(tmp, cfg, seed, progress, workers)
        if out_dir.exists():
            out_dir.rmdir()  # empty (checked above); rename needs the name free
        os.rename(tmp, out_dir)
    except OSError:
        # Another process may have finished the same dataset first: that is success.
        if (out_dir / "meta.json").is_file() and _meta_matches(out_dir / "meta.json", preset, seed):
            return out_dir
        raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out_dir


# --- one job = one image (plus its masks); returns what the index files need.
def _scene_job(root: Path, seed: int, cfg: SynthPreset, split: str, i: int) -> str:
    stem = f"{split}_{i:06d}"
    d = draw_scene(seed, split, i, cfg.image_size, cfg.max_objects)
    voc, ade = root / "VOC2012", root / "ADEChallengeData2016"
    ade_split = "training" if split == "train" else "validation"
    jpg = voc / "JPEGImages" / f"{stem}.jpg"
    _save_jpeg(d.image, jpg)
    save_palette_png(d.label, voc / "SegmentationClass" / f"{stem}.png")
    if split == "train":
        save_gray_png(d.label, voc / "SegmentationClassAug" / f"{stem}.png")
    link_or_copy(jpg, ade / "images" / ade_split / f"{stem}.jpg")  # the same JPEGs as the VOC layout
    save_gray_png(d.label + 1, ade / "annotations" / ade_split / f"{stem}.png")
    return json.dumps({"stem": stem, "split": split, "background": d.background, "objects": d.objects})


def _object_job(root: Path, seed: int, cfg: SynthPreset, split: str, i: int) -> str:
    d = draw_object(seed, split, i, cfg.image_size)
    rel = f"imagenet/{split}/{THING_CLASSES[object_class(split, i)]}/obj_{split}_{i:06d}.jpg"
    _save_jpeg(d.image, root / rel)
    return rel


def _caption_job(root: Path, seed: int, cfg: SynthPreset, g: int, k: int, things, stuff) -> str:
    d = draw_caption_render(seed, g, k, things, stuff, cfg.image_size)
    rel = f"images/cap_{g:06d}_{k}.jpg"
    _save_jpeg(d.image, root / "captions" / rel)
    return rel


# Below this many images a process pool costs more than it saves.
_POOL_MIN_JOBS = 500

_JOBS = {"scene": _scene_job, "object": _object_job, "caption": _caption_job}


def _run_job(root: Path, seed: int, cfg: SynthPreset, job: tuple) -> str:
    return _JOBS[job[0]](root, seed, cfg, *job[1:])


def _run_jobs(root, seed, cfg, jobs: list[tuple], workers: int, bar) -> list[str]:
    """Results in job order, whatever the number of processes."""
    import functools
    import multiprocessing as mp

    fn = functools.partial(_run_job, root, seed, cfg)
    if workers <= 1 or len(jobs) < _POOL_MIN_JOBS:
        out = []
        for job in jobs:
            out.append(fn(job))
            bar.update()
        return out
    # fork: workers inherit the imported modules and need no __main__ guard in scripts.
    ctx = mp.get_context("fork" if "fork" in mp.get_all_start_methods() else "spawn")
    with ctx.Pool(workers) as pool:
        out = []
        for result in pool.imap(fn, jobs, chunksize=32):
            out.append(result)
            bar.update()
        return out


def _write_all(root: Path, cfg: SynthPreset, seed: int, progress: bool, workers: int = 1) -> None:
    _make_folders(root)
    specs = caption_specs(seed, cfg.caption_groups, cfg.max_caption_objects)
    scene_lines, object_paths, caption_paths = _render_all(root, cfg, seed, specs, progress, workers)
    pretrain = _write_indexes(root, cfg, specs, scene_lines, object_paths, caption_paths)
    meta = _meta(cfg, seed, n_caption_images=len(caption_paths), n_pretrain=len(pretrain))
    # meta.json last: its presence is what marks the dataset complete.
    (root / "meta.json").write_text(json.dumps(meta, indent=2) + "\n")


def _make_folders(root: Path) -> None:
    voc, ade = root / "VOC2012", root / "ADEChallengeData2016"
    folders = [voc / "JPEGImages", voc / "SegmentationClass", voc / "SegmentationClassAug",
               voc / "ImageSets" / "Segmentation", root / "captions" / "images"]
    folders += [ade / kind / split for kind in ("images", "annotations")
                for split in ("training", "validation")]
    folders += [root / "imagenet" / split / name for split in ("train", "val") for name in THING_CLASSES]
    for d in folders:
        d.mkdir(parents=True, exist_ok=True)


def _render_all(root: Path, cfg: SynthPreset, seed: int, specs: list, progress: bool,
                workers: int) -> tuple[list, list, list]:
    """Every scene, object and caption image rendered: (scene ground-truth lines, object image
    paths, caption image paths)."""
    from tqdm import tqdm

    scene_jobs = [("scene", split, i) for split, n in (("train", cfg.scene_train), ("val", cfg.scene_val))
                  for i in range(n)]
    object_jobs = [("object", split, i) for split, n in (("train", cfg.object_train), ("val", cfg.object_val))
                   for i in range(n)]
    caption_jobs = [("caption", g, k, things, stuff) for g, (things, stuff) in enumerate(specs)
                    for k in range(cfg.renders_per_caption)]
    jobs = scene_jobs + object_jobs + caption_jobs
    with tqdm(total=len(jobs), desc=f"SynthScenes {cfg.name} (seed {seed})", unit="img",
              disable=not progress) as bar:
        results = _run_jobs(root, seed, cfg, jobs, workers, bar)
    scene_lines = results[: len(scene_jobs)]
    object_paths = results[len(scene_jobs): len(scene_jobs) + len(object_jobs)]
    caption_paths = results[len(scene_jobs) + len(object_jobs):]
    return scene_lines, object_paths, caption_paths


def _write_indexes(root: Path, cfg: SynthPreset, specs: list, scene_lines: list, object_paths: list,
                   caption_paths: list) -> list[str]:
    """Index files: split lists, per-scene ground truth, caption groups, pretraining list (returned)."""
    sets = root / "VOC2012" / "ImageSets" / "Segmentation"
    train_stems = [f"train_{i:06d}" for i in range(cfg.scene_train)]
    (sets / "train.txt").write_text("".join(s + "\n" for s in train_stems))
    (sets / "val.txt").write_text("".join(f"val_{i:06d}\n" for i in range(cfg.scene_val)))
    # SynthScenes has no extra SBD annotations: trainaug is the train split, written in the
    # aug layout so that configs naming `trainaug` run unchanged on it.
    (sets / "trainaug.txt").write_text("".join(s + "\n" for s in train_stems))
    (root / "scenes.jsonl").write_text("".join(line + "\n" for line in scene_lines))
    r = cfg.renders_per_caption
    groups = [json.dumps({"caption": caption_text(things, stuff), "group_id": g,
                          "images": caption_paths[g * r:(g + 1) * r]})
              for g, (things, stuff) in enumerate(specs)]
    (root / "captions" / "captions.jsonl").write_text("".join(line + "\n" for line in groups))
    pretrain = [f"VOC2012/JPEGImages/{s}.jpg" for s in train_stems] + object_paths[: cfg.object_train]
    (root / "pretrain.txt").write_text("".join(p + "\n" for p in pretrain))
    return pretrain


def _meta(cfg: SynthPreset, seed: int, n_caption_images: int, n_pretrain: int) -> dict:
    """The meta.json of a generated root."""
    return {
        "generator": "synthscenes",
        "version": GENERATOR_VERSION,
        "preset": cfg.name,
        "seed": seed,
        "image_size": cfg.image_size,
        "preset_config": dataclasses.asdict(cfg),
        "ignore_index": 255,
        "classes": {
            "shapes": list(SHAPES),
            "textures": list(TEXTURES),
            "stuff": list(STUFF_CLASSES),
            "things": list(THING_CLASSES),
            "voc": list(SEG_CLASSES),            # label k (0 = first stuff class)
            "ade20k": list(SEG_CLASSES),         # after reduce_zero_label; on disk k + 1
            "imagenet": sorted(THING_CLASSES),   # ImageFolder order (alphabetical)
        },
        "counts": {
            "scenes": {"train": cfg.scene_train, "val": cfg.scene_val},
            "objects": {"train": cfg.object_train, "val": cfg.object_val},
            "captions": {"groups": cfg.caption_groups, "images": n_caption_images},
            "pretrain": n_pretrain,
        },
        "layouts": {
            "voc": "VOC2012", "ade20k": "ADEChallengeData2016", "imagenet": "imagenet",
            "captions": "captions/captions.jsonl", "scenes": "scenes.jsonl",
        },
        "pretrain": {"list": "pretrain.txt",
                     "sources": ["VOC2012/JPEGImages (train split scenes)", "imagenet/train"]},
    }


# ============================================================================ reading helpers
def load_meta(root: str | Path) -> dict:
    """The meta.json of a SynthScenes root (DataError if ``root`` is not one)."""
    path = Path(root) / "meta.json"
    if not path.is_file():
        raise DataError(f"{path} not found: {root} is not a SynthScenes root; generate one with "
                        f"`ssl-bench data synth --out {root}`")
    try:
        return json.loads(path.read_text())
    except ValueError as exc:
        raise DataError(f"{path} is not valid JSON ({exc}); regenerate the dataset") from exc


def pretrain_image_paths(root: str | Path) -> list[Path]:
    """Absolute paths of the pretraining images listed in ``root/pretrain.txt``."""
    root = Path(root)
    listing = root / "pretrain.txt"
    if not listing.is_file():
        raise DataError(
            f"{listing} not found: expected a SynthScenes root (or a folder with a pretrain.txt of "
            f"image paths relative to it); generate one with `ssl-bench data synth --out {root}`")
    paths = [root / line.strip() for line in listing.read_text().splitlines() if line.strip()]
    if not paths:
        raise DataError(f"{listing} lists no images; regenerate the dataset")
    missing = [p for p in paths if not p.is_file()]
    if missing:
        raise DataError(f"{listing}: {len(missing)} listed image(s) do not exist, e.g. {missing[0]}; "
                        f"the dataset is incomplete (regenerate it)")
    return paths
