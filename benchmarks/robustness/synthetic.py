"""SynthScenes for ``robustness``: SynthScenes' object-centric classes (shape x texture, one object
on a stuff background: harness.data.synthetic.draw_object) and shifted copies of them, in the
layouts of the real sets, under one root:

    train/<class>/, val/<class>/ILSVRC2012_val_NNNNNNNN.JPEG   the head's data (ImageNet layout)
    imagenet-a/<class>/            a subset of the classes (the even ones), fresh draws, objects smaller
    imagenet-r/<class>/            the odd classes as renditions: grey, posterised
    imagenet-sketch/<class>/       every class as an edge drawing
    imagenetv2-matched-frequency/<index>/   fresh draws in folders named by class index
    real.json                      label lists per val image: some empty, some with a second label
    imagenet-c/<corruption>/<severity>/<class>/   the val images corrupted (numpy ops), same names
    bg_challenge/<variant>/val/<class>/   background variants: the object on black, on another
                                   image's background (same class, random, next class), removed

Classes: the 4 background classes (preset small: what a suite's {synth:robustness} is, since the
CPU-budget checkpoints learn them) or the 12 object classes of the same images (presets tiny,
small_objects). Every image is drawn from its own seeded RNG; numpy and PIL only.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from PIL import Image

from harness.data.generated import write_once
from harness.data.synthetic import NUM_STUFF, STUFF_CLASSES, THING_CLASSES, draw_object, object_class
from harness.errors import ConfigError

VERSION = 2
GENERATOR = "synthscenes-robustness"
SIZE = 64
CORRUPTIONS = ("gaussian_noise", "contrast", "pixelate", "brightness")


@dataclass(frozen=True)
class Preset:
    n_train: int
    n_val: int
    n_shift: int  # images per fresh-draw set
    # "object": the 12 object classes (the foreground defines the class, as in ImageNet; CPU-budget
    # checkpoints stay near chance on them: docs/findings/synthscenes.md); "background": the 4 stuff
    # classes of the same images (learnt in the CPU budget; the background variants then remove or
    # swap what defines the class)
    label: str = "object"

    @property
    def classes(self) -> tuple[str, ...]:
        return THING_CLASSES if self.label == "object" else STUFF_CLASSES

    def label_of(self, split: str, index: int, drawn) -> int:
        return object_class(split, index) if self.label == "object" else STUFF_CLASSES.index(drawn.background[0])


PRESETS = {"tiny": Preset(48, 24, 24), "small": Preset(480, 120, 120, "background"),
           "small_objects": Preset(480, 120, 120)}


def _save(img: np.ndarray, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(np.clip(img, 0, 255).astype(np.uint8)).save(path, "JPEG", quality=95, subsampling=0)


def corrupt(img: np.ndarray, name: str, severity: int, rng: np.random.Generator) -> np.ndarray:
    """Simple stand-ins of ImageNet-C's corruptions, stronger with ``severity`` (1-5)."""
    x = img.astype(np.float64)
    if name == "gaussian_noise":
        return x + rng.normal(0, 12.0 * severity, x.shape)
    if name == "contrast":
        f = 1.0 - 0.17 * severity
        return (x - x.mean()) * f + x.mean()
    if name == "brightness":
        return x + 25.0 * severity
    if name == "pixelate":
        k = 2 ** min(severity, 4)
        small = x[::k, ::k]
        return np.repeat(np.repeat(small, k, 0), k, 1)[:x.shape[0], :x.shape[1]]
    raise ConfigError(f"no synthetic corruption {name!r}; choose among {', '.join(CORRUPTIONS)}")


def _sketch(img: np.ndarray) -> np.ndarray:
    g = img.astype(np.float64).mean(2)
    edges = np.hypot(*np.gradient(g))
    return np.repeat((255 - np.clip(edges * 4, 0, 255))[..., None], 3, 2)


def _rendition(img: np.ndarray) -> np.ndarray:
    g = img.astype(np.float64).mean(2, keepdims=True)
    return np.repeat(np.floor(g / 64) * 64 + 32, 3, 2)


def _shrunk(img: np.ndarray) -> np.ndarray:
    """The object at 2/3 size, centred on an edge-replicated frame (a harder view)."""
    small = np.asarray(Image.fromarray(img).resize((SIZE * 2 // 3, SIZE * 2 // 3), Image.BILINEAR))
    pad = (SIZE - small.shape[0]) // 2
    return np.pad(small, ((pad, SIZE - small.shape[0] - pad), (pad, SIZE - small.shape[1] - pad), (0, 0)), "edge")


def _write_head_data(root: Path, cfg: Preset, seed: int) -> list:
    for i in range(cfg.n_train):
        d = draw_object(seed, "train", i, SIZE)
        _save(d.image, root / "train" / cfg.classes[cfg.label_of("train", i, d)] / f"train_{i:05d}.JPEG")
    val = []
    for i in range(cfg.n_val):
        d = draw_object(seed, "val", i, SIZE)
        cls = cfg.label_of("val", i, d)
        name = f"ILSVRC2012_val_{i + 1:08d}.JPEG"
        _save(d.image, root / "val" / cfg.classes[cls] / name)
        val.append((cls, name, d))
    return val


def _write_fresh_sets(root: Path, cfg: Preset, seed: int) -> None:
    for i in range(cfg.n_shift):
        d = draw_object(seed + 7919, "val", i, SIZE)
        cls, img, name = cfg.label_of("val", i, d), d.image, f"img_{i:05d}.JPEG"
        if cls % 2 == 0:
            _save(_shrunk(img), root / "imagenet-a" / cfg.classes[cls] / name)
        else:
            _save(_rendition(img), root / "imagenet-r" / cfg.classes[cls] / name)
        _save(_sketch(img), root / "imagenet-sketch" / cfg.classes[cls] / name)
        d = draw_object(seed + 104729, "val", i, SIZE)
        # ImageNetV2's folder is the class index of the training split's (sorted) classes
        index = sorted(cfg.classes).index(cfg.classes[cfg.label_of("val", i, d)])
        _save(d.image, root / "imagenetv2-matched-frequency" / str(index) / name)


def _write_real(root: Path, val: list, classes) -> None:
    """real.json's labels are training class indices: positions in the sorted class names."""
    order = sorted(classes)
    labels = [[] for _ in val]
    for k, (cls, _, _) in enumerate(val):  # val[k] is ILSVRC2012_val_{k+1}
        first = order.index(classes[cls])
        labels[k] = [] if k % 5 == 4 else ([first, (first + 1) % len(order)] if k % 7 == 3 else [first])
    (root / "real.json").write_text(json.dumps(labels))


def _write_corrupted(root: Path, val: list, seed: int, classes) -> None:
    for c_i, c in enumerate(CORRUPTIONS):
        for s in range(1, 6):
            for k, (cls, name, d) in enumerate(val):
                rng = np.random.default_rng([seed, 11, c_i, s, k])
                _save(corrupt(d.image, c, s, rng), root / "imagenet-c" / c / str(s) / classes[cls] / name)


def _write_backgrounds(root: Path, val: list, seed: int, classes) -> None:
    n = len(val)
    fg = [d.label >= NUM_STUFF for _, _, d in val]
    rng = np.random.default_rng([seed, 13])
    same = [next((j for j in range(1, n) if val[(k + j) % n][0] == val[k][0]), 1) for k in range(n)]
    nxt = [next((j for j in range(1, n) if val[(k + j) % n][0] != val[k][0]), 1) for k in range(n)]
    donors = {"mixed_same": [(k + same[k]) % n for k in range(n)], "mixed_next": [(k + nxt[k]) % n for k in range(n)],
              "mixed_rand": [int(j) for j in rng.integers(0, n, n)]}
    for k, (cls, name, d) in enumerate(val):
        img, mask = d.image, fg[k][..., None]
        no_fg = np.where(mask, 0, img)
        x0, y0, x1, y1 = d.objects[0]["bbox"]
        box = img.copy()
        box[y0:y1, x0:x1] = 0
        views = {"original": img, "only_fg": np.where(mask, img, 0), "no_fg": no_fg, "only_bg_b": box}
        for v, idx in donors.items():
            j = idx[k]
            views[v] = np.where(mask, img, np.where(fg[j][..., None], 0, val[j][2].image))
        for v, pic in views.items():
            _save(pic, root / "bg_challenge" / v / "val" / classes[cls] / name)


def generate(out_dir, preset: str = "small", seed: int = 0, progress: bool = True) -> Path:
    """Write the ``preset`` set under ``out_dir`` (once: harness.data.generated.write_once)."""
    if preset not in PRESETS:
        raise ConfigError(f"unknown robustness SynthScenes preset {preset!r}; choose one of {', '.join(PRESETS)}")
    cfg = PRESETS[preset]
    meta = {"generator": GENERATOR, "preset": preset, "seed": seed, "version": VERSION, "size": SIZE,
            "label": cfg.label, "classes": list(cfg.classes), "corruptions": list(CORRUPTIONS)}

    def write(tmp: Path) -> None:
        val = _write_head_data(tmp, cfg, seed)
        _write_fresh_sets(tmp, cfg, seed)
        _write_real(tmp, val, cfg.classes)
        _write_corrupted(tmp, val, seed, cfg.classes)
        _write_backgrounds(tmp, val, seed, cfg.classes)

    return write_once(out_dir, meta, write)
