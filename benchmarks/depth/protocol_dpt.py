"""``depth_dpt``: Probe3D's binned-depth probe (train_depth.py with configs/probe/depth_dpt.yaml,
mbanani/probe3d at a1f1464) on the shared DPT probe (harness/probes/dpt_probe.py): 256 linear bins
read as a depth (harness/probes/depth_bins.py, the bins in the scores' dtype as probes.py makes
them), resized to the target bilinearly with corners aligned, Probe3D's depth loss (dpt_losses.py)
and the per-frame depth metrics, plain and scale-aligned (dpt_metrics.py).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from benchmarks.depth.dpt_losses import depth_loss
from benchmarks.depth.dpt_metrics import DEPTH_METRICS, depth_metrics
from harness.examples import Panel
from harness.presets import load_presets
from harness.probes.depth_bins import bins_to_depth
from harness.probes.dpt_probe import Config, DPTProbe
from harness.registry import register_protocol


@register_protocol("depth_dpt")
class DepthDPT(DPTProbe):
    """Depth: 256 linear bins over 0.001-10 m; RMSE (m) and delta accuracies (%)."""

    Config = Config
    PRESETS: dict[str, dict[str, Any]] = load_presets("depth_dpt", Path(__file__).parent / "presets")
    DEFAULT_PRESET = "probe3d"
    REPORTED = DEPTH_METRICS

    def out_dim(self) -> int:
        return self.cfg.n_bins

    def predict(self, head, feats, size) -> torch.Tensor:
        cfg = self.cfg
        logits = head(feats)
        depth = bins_to_depth(logits, cfg.min_depth, cfg.max_depth, "linear", cfg.bin_norm,
                              centres_dtype=logits.dtype)
        return F.interpolate(depth, size=size, mode="bilinear", align_corners=True)

    def loss(self, pred, depth, normals) -> torch.Tensor:
        return depth_loss(pred, depth, self.cfg.loss_max_depth)

    def metrics(self, pred, depth, normals) -> dict[str, torch.Tensor]:
        aligned = depth_metrics(pred, depth, scale_invariant=True)  # train_depth.py's second test pass
        return {**depth_metrics(pred, depth), **{f"{m}_aligned": v for m, v in aligned.items()}}

    def scale(self, metric: str) -> float:
        return 100.0 if metric.startswith("delta") else 1.0

    def panels(self, pred, depth, normals) -> list[Panel]:
        truth, guess = depth[0, 0].numpy().astype(np.float32), pred[0, 0].numpy().astype(np.float32)
        rmse = float(self.metrics(pred, depth, normals)["rmse"][0])
        shown = np.concatenate([truth[truth > 0], guess.ravel()])
        scale = (float(shown.min()), float(shown.max()))
        error = np.where(truth > 0, np.abs(guess - truth), np.nan).astype(np.float32)
        return [Panel("ground truth", kind="values", image=truth, unit="m", value_range=scale),
                Panel("prediction", kind="values", image=guess, unit="m", text=f"RMSE {rmse:.3f} m",
                      value_range=scale),
                Panel("|error|", kind="values", image=error, unit="m")]


__all__ = ["Config", "DepthDPT"]
