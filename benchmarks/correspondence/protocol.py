"""Zero-shot keypoint correspondence (``correspondence``) as Probe3D evaluates SPair-71k
(mbanani/probe3d evaluate_spair_correspondence.py with configs/spair_correspondence.yaml);
benchmarks/correspondence/README.md gives the source of each default.

For each category and each viewpoint bin (small, medium, large, and all pairs), up to 200 test
pairs are drawn (Python's random, seed 20); both images are padded to a square, resized to
800x800 and passed through the frozen backbone (last block, no final norm); each keypoint visible
in both images is matched to the target patch of highest cosine similarity and counts as correct
within 0.1 of the target box's longer side. A bin's PCK is the mean over categories of each
category's fraction of correct keypoints.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch

from benchmarks.correspondence.matching import (SquareResize, match_keypoints, pair_errors, patch_stride,
                                                 scaled_keypoints, select_pairs, threshold_scale, within)
from benchmarks.correspondence.per_image_kind import category_pck_block, mean_over_categories
from harness.data.spair71k import PairImages
from harness.data.io import image_size, load_rgb
from harness.features.grid import coarse_grid_flag
from harness.data.transforms import IMAGENET_MEAN, IMAGENET_STD
from harness.errors import ConfigError, DataError
from harness.examples import Example, Panel, chosen_items, seen_by_model
from harness.features.extract import extract_features
from harness.presets import load_presets
from harness.protocol import Protocol, ProtocolResult
from harness.registry import DATASETS, register_protocol

# Probe3D's loop order over viewpoint_variation (None: every pair of the category)
BINS: tuple[tuple[str, int | None], ...] = (("vp0", 0), ("vp1", 1), ("vp2", 2), ("all", None))
METRIC_BINS = {"PCK": "all", "PCK_vp0": "vp0", "PCK_vp1": "vp1", "PCK_vp2": "vp2"}


@dataclass
class Config:
    dataset: str = "spair71k"
    split: str = "test"                    # spair_correspondence.yaml split
    preset: str | None = None
    image_size: int = 800                  # spair_correspondence.yaml image_size
    num_instances: int | None = 200        # pairs per (category, bin); None: all
    instance_seed: int = 20                # SPairDataset: random.seed(20)
    alpha: float = 0.1                     # main(): thresh = 0.10 of the target box's longer side
    categories: list[str] | None = None    # eval_class "all": every category of the split
    final_norm: bool = False               # Probe3D's wrappers return block outputs before the final norm
    pad_value: int = 255                   # spair.py get_image: np.pad(..., constant_values=255)
    norm_mean: list[float] = field(default_factory=lambda: list(IMAGENET_MEAN))  # image_mean: imagenet
    norm_std: list[float] = field(default_factory=lambda: list(IMAGENET_STD))
    precision: Literal["fp32", "fp16", "bf16"] = "fp32"
    patch_dtype: Literal["float32", "float16"] = "float32"
    # --- execution (not in the fingerprint)
    batch_size: int = 8
    num_workers: int = 0
    threads: int | None = None
    progress: bool = True

    def __post_init__(self):
        checks = [(self.image_size >= 1, f"image_size must be >= 1, found {self.image_size}"),
                  (self.alpha > 0, f"alpha must be > 0, found {self.alpha}"),
                  (self.num_instances is None or self.num_instances >= 0,
                   f"num_instances must be >= 0 or null, found {self.num_instances}"),
                  (0 <= self.pad_value <= 255, f"pad_value must be in 0..255, found {self.pad_value}"),
                  (self.categories is None or len(self.categories) > 0, "categories: give a non-empty list or null")]
        for ok, msg in checks:
            if not ok:
                raise ValueError(msg)


# probe3d, synth: benchmarks/correspondence/presets/correspondence_*.yaml
PRESETS: dict[str, dict[str, Any]] = load_presets("correspondence", Path(__file__).parent / "presets")


@register_protocol("correspondence")
class Correspondence(Protocol):
    Config = Config
    PRESETS = PRESETS
    DEFAULT_PRESET = "probe3d"
    NOT_IN_FINGERPRINT = ("batch_size", "num_workers", "threads", "progress")
    RECORDED_AS = {"final_norm": "backbone_norm"}  # its records' name

    def check_model(self, backbone) -> int:
        return patch_stride(backbone, "correspondence", "image_size", self.cfg.image_size)

    def selections(self, data) -> dict[tuple[str, str], list]:
        """(bin, category) -> the pairs Probe3D evaluates there."""
        cfg = self.cfg
        found = data.categories
        cats = list(cfg.categories) if cfg.categories else found
        unknown = sorted(set(cats) - set(found))
        if unknown:
            raise ConfigError(f"correspondence: categories {unknown} have no pairs in split {cfg.split!r}; "
                              f"the split has {', '.join(found)}")
        return {(b, c): select_pairs(data.pairs, c, vp, cfg.num_instances, cfg.instance_seed)
                for c in cats for b, vp in BINS}

    def transform(self, patch: int) -> SquareResize:
        cfg = self.cfg
        return SquareResize(cfg.image_size, patch, cfg.pad_value, tuple(cfg.norm_mean), tuple(cfg.norm_std))

    def features(self, model, data, images: list[tuple[str, str]], patch: int):
        cfg = self.cfg
        return extract_features(model, PairImages(data, images), self.transform(patch), n_last_blocks=1,
                                final_norm=cfg.final_norm,
                                patches=True, patch_dtype=cfg.patch_dtype, batch_size=cfg.batch_size,
                                num_workers=cfg.num_workers, progress=cfg.progress, precision=cfg.precision,
                                threads=cfg.threads, desc="correspondence images")

    def run(self, model, data_root: Path) -> list[ProtocolResult]:
        cfg = self.cfg
        patch = self.check_model(model.backbone)
        data = DATASETS.get(cfg.dataset)(data_root, cfg.split)
        chosen = self.selections(data)
        pairs = {p.name: p for sel in chosen.values() for p in sel}
        images = sorted({(p.category, n) for p in pairs.values() for n in (p.source, p.target)})
        model.backbone.eval()
        t0 = time.perf_counter()
        fs = self.features(model, data, images, patch)
        extract_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        scored = self.score_pairs(data, pairs, fs, {im: i for i, im in enumerate(images)})
        match_s = time.perf_counter() - t0
        result = self.result(chosen, scored, len(images), extract_s, match_s)
        flag = self.coarse_grid(model.name, patch)
        result.flags = [flag] if flag else []
        return [result]

    def coarse_grid(self, model_name: str, patch: int) -> str | None:
        """The flag of a grid too coarse for PCK at ``alpha``: a match is its patch's centre, so with
        fewer than 1 / (2 alpha) cells a side half a patch is more than alpha of even a box that
        spans the whole image, and most right matches count as misses."""
        cfg = self.cfg
        cells = -(-cfg.image_size // patch)  # center padding to a whole patch
        minimum = math.ceil(1 / (2 * cfg.alpha) - 1e-9)
        why = (f"a match is its patch's centre: below 1/(2 alpha) = {minimum} cells a side, half a patch is more "
               f"than alpha = {cfg.alpha} of even a box spanning the whole image, so most right matches miss")
        return coarse_grid_flag("correspondence", (cells, cells), minimum, why, model_name, patch,
                                (cfg.image_size, cfg.image_size))

    def pair_inputs(self, data, p, fs, index: dict):
        """(source features, target features, source keypoints, target keypoints) of one pair:
        (d, h, w) grids and keypoints in the resized square."""
        kps, feats = [], []
        for image in (p.source, p.target):
            w, h = image_size(data.image_path(p.category, image))
            kps.append(scaled_keypoints(data.keypoints(p.category, image), (h, w), self.cfg.image_size))
            feats.append(torch.from_numpy(np.array(fs.patches(index[(p.category, image)])[0])).permute(2, 0, 1))
        if kps[0].shape != kps[1].shape:
            raise DataError(f"SPair pair {p.name}: ImageAnnotation gives its images {len(kps[0])} and {len(kps[1])} "
                            f"keypoint slots; the images of one category share one keypoint list")
        return feats[0], feats[1], kps[0], kps[1]

    def score_pairs(self, data, pairs: dict, fs, index: dict) -> dict[str, tuple[int, int]]:
        """pair name -> (keypoints within alpha, keypoints visible in both images)."""
        cfg, out = self.cfg, {}
        for name, p in pairs.items():
            f_src, f_trg, k_src, k_trg = self.pair_inputs(data, p, fs, index)
            errors = pair_errors(f_src, f_trg, k_src, k_trg, cfg.image_size,
                                 threshold_scale(p.target_box, p.target_size))
            out[name] = (int(within(errors, cfg.alpha).sum()), int(errors.size))
        return out

    def examples(self, model, data_root: Path, count: int = 4, seed: int = 0) -> list[Example]:
        """Pairs drawn with ``seed`` from those :meth:`run` evaluates: both images as the model saw
        them, side by side, a line from each source keypoint to its match, green within alpha of
        the target box, red beyond; captioned with the pair's correct keypoints."""
        cfg = self.cfg
        patch = self.check_model(model.backbone)
        data = DATASETS.get(cfg.dataset)(data_root, cfg.split)
        unique = {p.name: p for sel in self.selections(data).values() for p in sel}
        pairs = [unique[name] for name in sorted(unique)]
        chosen = [pairs[i] for i in chosen_items(len(pairs), count, seed)]
        images = sorted({(p.category, n) for p in chosen for n in (p.source, p.target)})
        model.backbone.eval()
        fs, index = self.features(model, data, images, patch), {im: i for i, im in enumerate(images)}
        return [self.example(data, p, fs, index, self.transform(patch)) for p in chosen]

    def example(self, data, p, fs, index: dict, transform) -> Example:
        cfg = self.cfg
        f_src, f_trg, k_src, k_trg = self.pair_inputs(data, p, fs, index)
        pred, true, both = match_keypoints(f_src, f_trg, k_src, k_trg, cfg.image_size)
        ok = within(((pred - true).norm(dim=-1) / threshold_scale(p.target_box, p.target_size)).numpy(), cfg.alpha)
        pics = [seen_by_model(transform(load_rgb(data.image_path(p.category, im))), cfg.norm_mean, cfg.norm_std)
                for im in (p.source, p.target)]
        pad, width = (pics[0].shape[1] - cfg.image_size) // 2, pics[0].shape[1]  # the patch padding, each side
        lines = np.concatenate([k_src[both, :2] + pad, pred.numpy() * cfg.image_size + pad + [width, 0]], axis=1)
        return Example(f"{p.category} {p.name.split('-')[0]} (viewpoint {p.viewpoint})", [
            Panel("source | target", image=np.concatenate(pics, axis=1), lines=lines, line_ok=ok,
                  text=f"{int(ok.sum())} of {len(ok)} within {cfg.alpha:g}")])

    def result(self, chosen: dict, scored: dict, n_images: int, extract_s: float, match_s: float) -> ProtocolResult:
        cfg = self.cfg
        cells = list(chosen)
        cell = [i for i, c in enumerate(cells) for _ in chosen[c]]
        hits = [scored[p.name][0] for c in cells for p in chosen[c]]
        counts = [scored[p.name][1] for c in cells for p in chosen[c]]
        block = category_pck_block(cells, np.array(cell), np.array(hits), np.array(counts), METRIC_BINS)
        per_cell = {c: (sum(scored[p.name][0] for p in chosen[c]), sum(scored[p.name][1] for p in chosen[c]))
                    for c in cells}
        metrics = {}
        for metric, b in METRIC_BINS.items():
            mine = [per_cell[c] for c in cells if c[0] == b]
            value = mean_over_categories(np.array([[h for h, _ in mine]]), np.array([[n for _, n in mine]]))[0]
            metrics[metric] = float(100.0 * value)
        per_category = {cat: {b: (100.0 * h / n if n else None) for (b, c), (h, n) in per_cell.items() if c == cat}
                        for cat in sorted({c for _, c in cells})}
        n_pairs = {b: sum(len(chosen[c]) for c in cells if c[0] == b) for b, _ in BINS}
        return ProtocolResult(
            metrics=metrics, dataset=cfg.dataset, split=cfg.split, seed=cfg.instance_seed,
            params={"preset": cfg.preset, "per_category": per_category, "n_pairs": n_pairs,
                    "n_keypoints": {b: sum(n for (bb, _), (_, n) in per_cell.items() if bb == b) for b, _ in BINS},
                    "n_images": n_images},
            cost={"extract_s": extract_s, "match_s": match_s,
                  "match_ms_per_pair": 1000 * match_s / max(1, len(scored))},
            per_image=block)


__all__ = ["Config", "PRESETS", "Correspondence"]
