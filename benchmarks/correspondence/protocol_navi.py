"""Zero-shot multiview correspondence on NAVI (``correspondence_navi``) as Probe3D evaluates it
(mbanani/probe3d evaluate_navi_correspondence.py with configs/navi_correspondence.yaml and
configs/dataset/navi.yaml); benchmarks/correspondence/README.md gives the source of each default.

Each pair is two views of one object in its wild_set (harness/data/navi_pairs.py: the partner drawn within 120
degrees, every 4th view a first view). Both prepared 512x512 frames pass through the frozen backbone
(last block, no final norm); the patch features are upsampled bicubically to the point grid at a
quarter of the frame (128x128), the positions with depth are matched by nearest neighbour with
the ratio test and the 1000 most distinctive correspondences kept. A correspondence's 3D error is
the distance between view 0's point moved by the true relative pose and view 1's point, its 2D error
the distance of their projections in view 1. Metrics: the share of correspondences within 1, 2 and 5
cm and within 5, 25 and 50 px, and the mean over pairs of each pair's share within 2 cm, binned by
the pair's relative rotation (0-30, 30-60, 60-90, 90-120 degrees).
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch

from benchmarks.correspondence.matching import patch_stride
from benchmarks.correspondence.matching_navi import (ANGLE_BINS, BIN_THRESHOLD, THRESHOLDS_M, THRESHOLDS_PX,
                                                     FrameNormalize, angle_bin, correspondence_errors, pair_counts,
                                                     ratio_test_matches, relative_pose, rotation_angle_deg,
                                                     scaled_points)
from harness.data.navi_pairs import NaviImages
from harness.data.transforms import IMAGENET_MEAN, IMAGENET_STD
from harness.examples import Example, Panel, chosen_items
from harness.features.extract import extract_features
from harness.per_image import ratios_block
from harness.presets import load_presets
from harness.protocol import Protocol, ProtocolResult
from harness.registry import DATASETS, register_protocol

RECALLS = (*THRESHOLDS_M, *THRESHOLDS_PX)
EXAMPLE_LINES = 60  # correspondences drawn per example, the most distinctive first


@dataclass
class Config:
    dataset: str = "navi"
    split: str = "test"                    # build_loader(cfg.dataset, "test", ...): the wild_set views
    preset: str | None = None
    frame_size: int = 512                  # navi.py image_size (512, 512)
    scale_factor: float = 0.25             # navi_correspondence.yaml scale_factor: the point grid
    num_corr: int = 1000                   # navi_correspondence.yaml num_corr
    max_angle: float = 120.0               # NAVI(max_angle=120): a partner's largest relative rotation
    pair_seed: int = 8                     # generate_instance_pairs: torch.manual_seed(8)
    final_norm: bool = False               # Probe3D's wrappers return block outputs before the final norm
    norm_mean: list[float] = field(default_factory=lambda: list(IMAGENET_MEAN))  # navi.yaml image_mean
    norm_std: list[float] = field(default_factory=lambda: list(IMAGENET_STD))
    precision: Literal["fp32", "fp16", "bf16"] = "fp32"
    patch_dtype: Literal["float32", "float16"] = "float32"
    # --- execution (not in the fingerprint)
    batch_size: int = 4                    # build_loader(..., 4, ...)
    num_workers: int = 0
    threads: int | None = None
    progress: bool = True

    def __post_init__(self):
        checks = [(self.frame_size >= 1, f"frame_size must be >= 1, found {self.frame_size}"),
                  (0 < self.scale_factor <= 1, f"scale_factor must be in (0, 1], found {self.scale_factor}"),
                  (self.num_corr >= 1, f"num_corr must be >= 1, found {self.num_corr}"),
                  (0 < self.max_angle <= 180, f"max_angle must be in (0, 180] degrees, found {self.max_angle}")]
        for ok, msg in checks:
            if not ok:
                raise ValueError(msg)


# probe3d, synth: benchmarks/correspondence/presets/correspondence_navi_*.yaml
PRESETS: dict[str, dict[str, Any]] = load_presets("correspondence_navi", Path(__file__).parent / "presets")


@register_protocol("correspondence_navi")
class CorrespondenceNAVI(Protocol):
    Config = Config
    PRESETS = PRESETS
    DEFAULT_PRESET = "probe3d"
    NOT_IN_FINGERPRINT = ("batch_size", "num_workers", "threads", "progress")
    RECORDED_AS = {"final_norm": "backbone_norm"}  # its records' name

    def check_model(self, backbone) -> int:
        return patch_stride(backbone, "correspondence_navi", "frame_size", self.cfg.frame_size)

    def data(self, data_root: Path):
        cfg = self.cfg
        return DATASETS.get(cfg.dataset)(data_root, cfg.split, max_angle=cfg.max_angle, pair_seed=cfg.pair_seed,
                                         frame_size=cfg.frame_size)

    def features(self, model, data, patch: int):
        cfg = self.cfg
        return extract_features(model, NaviImages(data, data.views),
                                FrameNormalize(patch, tuple(cfg.norm_mean), tuple(cfg.norm_std)), n_last_blocks=1,
                                final_norm=cfg.final_norm, patches=True, patch_dtype=cfg.patch_dtype,
                                batch_size=cfg.batch_size, num_workers=cfg.num_workers, progress=cfg.progress,
                                precision=cfg.precision, threads=cfg.threads, desc="NAVI frames")

    def run(self, model, data_root: Path) -> list[ProtocolResult]:
        patch = self.check_model(model.backbone)
        data = self.data(data_root)
        model.backbone.eval()
        t0 = time.perf_counter()
        fs = self.features(model, data, patch)
        extract_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        index = {v.key: i for i, v in enumerate(data.views)}
        scored = [self.score_pair(data, p, fs, index) for p in data.pairs]
        match_s = time.perf_counter() - t0
        return [self.result(data, scored, extract_s, match_s)]

    def pair_points(self, data, pair, fs, index: dict) -> tuple:
        """(view 0's and view 1's matched points and grid pixels, the relative pose, view 1's focal
        length)."""
        feats = [torch.from_numpy(np.array(fs.patches(index[v.key])[0])).permute(2, 0, 1)
                 for v in (pair.first, pair.second)]
        frames = [data.frame(v) for v in (pair.first, pair.second)]
        grids = [scaled_points(f["xyz"], self.cfg.scale_factor) for f in frames]
        c0, c1, uv0, uv1 = ratio_test_matches(feats[0], feats[1], grids[0], grids[1], self.cfg.num_corr)
        rt = relative_pose(frames[0]["pose"], frames[1]["pose"])
        return c0, c1, uv0, uv1, rt, frames[1]["focal"]

    @torch.no_grad()
    def score_pair(self, data, pair, fs, index: dict) -> dict[str, Any]:
        c0, c1, _, _, rt, focal = self.pair_points(data, pair, fs, index)
        err_3d, err_2d = correspondence_errors(c0, c1, rt, focal)
        return {"name": pair.name, "counts": pair_counts(err_3d, err_2d), "n": int(err_3d.numel()),
                "angle": rotation_angle_deg(rt)}

    @torch.no_grad()
    def examples(self, model, data_root: Path, count: int = 4, seed: int = 0) -> list[Example]:
        """Pairs drawn with ``seed`` from those :meth:`run` evaluates: both frames as the model saw
        them, side by side, a line from each of the ``EXAMPLE_LINES`` most distinctive
        correspondences' pixel in view 0 to its match in view 1, green within 2 cm in 3D, red beyond;
        captioned with the pair's correspondences within 2 cm."""
        patch = self.check_model(model.backbone)
        data = self.data(data_root)
        model.backbone.eval()
        fs = self.features(model, data, patch)
        index = {v.key: i for i, v in enumerate(data.views)}
        return [self.example(data, data.pairs[i], fs, index) for i in chosen_items(len(data.pairs), count, seed)]

    def example(self, data, pair, fs, index: dict) -> Example:
        c0, c1, uv0, uv1, rt, focal = self.pair_points(data, pair, fs, index)
        err_3d, _ = correspondence_errors(c0, c1, rt, focal)
        ok = (err_3d < BIN_THRESHOLD).numpy()
        size = self.cfg.frame_size
        step = size / math.floor(size * self.cfg.scale_factor)  # frame pixels per point-grid cell
        lines = torch.cat([uv0 * step, uv1 * step + torch.tensor([size, 0.0])], dim=1).numpy()[:EXAMPLE_LINES]
        image = np.concatenate([data.frame(v)["image"] for v in (pair.first, pair.second)], axis=1)
        return Example(f"{pair.name} ({rotation_angle_deg(rt):.0f} degrees apart)", [
            Panel("view 0 | view 1", image=image, lines=lines, line_ok=ok[:EXAMPLE_LINES],
                  text=f"{int(ok.sum())} of {len(ok)} within 2 cm")])

    def result(self, data, scored: list[dict], extract_s: float, match_s: float) -> ProtocolResult:
        n = np.array([s["n"] for s in scored], dtype=np.float64)
        num = {m: np.array([s["counts"][m] for s in scored], dtype=np.float64) for m in RECALLS}
        den = {m: n for m in RECALLS}
        bins = [angle_bin(s["angle"]) for s in scored]
        within = num[next(m for m, th in THRESHOLDS_M.items() if th == BIN_THRESHOLD)] / n
        for m in ANGLE_BINS:
            inside = np.array([b == m for b in bins], dtype=np.float64)
            num[m], den[m] = within * inside, inside
        block = ratios_block(num, den, scale={m: 100.0 for m in num})
        # an empty bin is NaN, as Probe3D's empty mean; the record writes it as null with this reason
        metrics = {m: (float(100.0 * num[m].sum() / den[m].sum()) if den[m].sum() else float("nan")) for m in num}
        undefined = {m: f"no pair of views is {lo}-{hi} degrees apart in this data (an empty bin)"
                     for m, (lo, hi) in ANGLE_BINS.items() if not den[m].sum()}
        undefined.update({m: "no correspondence was scored" for m in num if not den[m].sum() and m not in undefined})
        cfg = self.cfg
        return ProtocolResult(metrics_undefined=undefined,
            metrics=metrics, dataset=cfg.dataset, split=cfg.split, seed=cfg.pair_seed,
            params={"preset": cfg.preset, "n_pairs": len(scored), "n_views": len(data.views),
                    "n_pairs_by_angle": {m: int(den[m].sum()) for m in ANGLE_BINS},
                    "correspondences": int(n.sum())},
            cost={"extract_s": extract_s, "match_s": match_s,
                  "match_ms_per_pair": 1000 * match_s / max(1, len(scored))},
            per_image=block)


__all__ = ["Config", "PRESETS", "CorrespondenceNAVI"]
