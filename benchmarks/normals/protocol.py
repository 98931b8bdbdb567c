"""``normals_dpt``: Probe3D's surface-normal probe (train_snorm.py with configs/probe/snorm_dpt.yaml,
mbanani/probe3d at a1f1464) on the shared DPT probe (harness/probes/dpt_probe.py): its output resized
to the target by bicubic interpolation with corners aligned, the uncertainty-aware angular loss
(losses.py) and the per-frame angular metrics (metrics.py).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from benchmarks.normals.losses import angular_loss
from benchmarks.normals.metrics import NORMAL_METRICS, angular_error_deg, normal_metrics
from harness.examples import Panel
from harness.presets import load_presets
from harness.probes.dpt_probe import Config, DPTProbe
from harness.registry import register_protocol


@register_protocol("normals_dpt")
class NormalsDPT(DPTProbe):
    """Surface normals: angular RMSE and the % of valid pixels within 11.25, 22.5 and 30 degrees."""

    Config = Config
    PRESETS: dict[str, dict[str, Any]] = load_presets("normals_dpt", Path(__file__).parent / "presets")
    DEFAULT_PRESET = "probe3d"
    REPORTED = NORMAL_METRICS

    def out_dim(self) -> int:
        return 4 if self.cfg.uncertainty_aware else 3

    def predict(self, head, feats, size) -> torch.Tensor:
        return F.interpolate(head(feats), size=size, mode="bicubic", align_corners=True)

    def loss(self, pred, depth, normals) -> torch.Tensor:
        return angular_loss(pred, normals, depth[:, 0] > 0)

    def metrics(self, pred, depth, normals) -> dict[str, torch.Tensor]:
        return normal_metrics(pred, normals, depth[:, 0] > 0)

    def scale(self, metric: str) -> float:
        return 100.0 if metric.startswith("within_") else 1.0

    def panels(self, pred, depth, normals) -> list[Panel]:
        valid = depth[:, 0] > 0
        unit = F.normalize(pred[:, :3], dim=1)
        rmse = float(self.metrics(pred, depth, normals)["angular_rmse"][0])
        error = torch.where(valid, angular_error_deg(pred, normals), torch.nan)[0].numpy().astype(np.float32)

        def rgb(n):  # a normal's xyz in [-1, 1] as a colour
            return ((n[0].permute(1, 2, 0).numpy() + 1) * 127.5).clip(0, 255).astype(np.uint8)

        return [Panel("ground truth", image=rgb(normals)), Panel("prediction", image=rgb(unit),
                                                                  text=f"RMSE {rmse:.1f}°"),
                Panel("angular error", kind="values", image=error, unit="°")]


__all__ = ["Config", "NormalsDPT"]
