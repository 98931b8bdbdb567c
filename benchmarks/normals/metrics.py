"""Probe3D's evaluation metrics per image (evals/utils/metrics.py, commit a1f1464); the data set's
number is the mean over test images of each image's value (train_*.py validate: the per-image
values of every batch concatenated, then averaged).

Normals (``evaluate_surface_norm``): the angle in degrees between the first three predicted
channels and the truth, cosine clamped to [-1, 1]; over an image's valid pixels (depth > 0) its
RMSE and the fractions under 11.25, 22.5 and 30 degrees. An image without a valid pixel counts
with zeros (the pixel count is clamped to 1), as there. ``mean_angle`` and ``median_angle`` (the
iDISC / Fouhey statistics, per image here) are this project's additions, reported beside them.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

NORMAL_THRESHOLDS = {"within_11_25": 11.25, "within_22_5": 22.5, "within_30": 30.0}
NORMAL_METRICS = ("angular_rmse", "mean_angle", "median_angle", *NORMAL_THRESHOLDS)


def angular_error_deg(pred: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """(B, H, W) degrees between pred[:, :3] and target (B, 3, H, W)."""
    cos = F.cosine_similarity(pred[:, :3], target, dim=1).clamp(-1.0, 1.0)
    return torch.acos(cos) * 180.0 / torch.pi


def normal_metrics(pred: torch.Tensor, target: torch.Tensor, valid: torch.Tensor) -> dict[str, torch.Tensor]:
    """Each metric as a (B,) tensor; valid (B, H, W) bool."""
    valid = valid.float()
    err = angular_error_deg(pred, target) * valid
    count = valid.sum(dim=(1, 2)).clamp(min=1)
    out = {"angular_rmse": (err.pow(2).sum(dim=(1, 2)) / count).sqrt(),
           "mean_angle": err.sum(dim=(1, 2)) / count}
    for name, t in NORMAL_THRESHOLDS.items():
        out[name] = ((err < t).float() * valid).sum(dim=(1, 2)) / count
    medians = [e[v > 0].median() if (v > 0).any() else e.new_zeros(()) for e, v in zip(err, valid)]
    out["median_angle"] = torch.stack(medians)
    return {m: out[m] for m in NORMAL_METRICS}
