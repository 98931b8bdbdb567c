"""Probe3D's evaluation metrics per image (evals/utils/metrics.py, commit a1f1464); the data set's
number is the mean over test images of each image's value (train_*.py validate: the per-image
values of every batch concatenated, then averaged).

Normals (``evaluate_surface_norm``): the angle in degrees between the first three predicted
channels and the truth, cosine clamped to [-1, 1]; over an image's valid pixels (depth > 0) its
RMSE and the fractions under 11.25, 22.5 and 30 degrees. An image without a valid pixel counts
with zeros (the pixel count is clamped to 1), as there. ``mean_angle`` and ``median_angle`` (the
iDISC / Fouhey statistics, per image here) are this project's additions, reported beside them.

Depth (``evaluate_depth``): per image RMSE and delta < 1.25, 1.25^2, 1.25^3 over pixels with
gt > 0; the prediction is zeroed outside them first, as there. train_depth.py also evaluates
"scale-aligned" (``scale_invariant=True``): each prediction first mapped by the least-squares scale
and shift onto the truth's valid pixels (``match_scale_and_shift``; left as is where the system is
singular), not clamped afterwards.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

NORMAL_THRESHOLDS = {"within_11_25": 11.25, "within_22_5": 22.5, "within_30": 30.0}
NORMAL_METRICS = ("angular_rmse", "mean_angle", "median_angle", *NORMAL_THRESHOLDS)
DEPTH_METRICS = ("rmse", "delta1", "delta2", "delta3")


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


def match_scale_and_shift(pred: torch.Tensor, gt: torch.Tensor) -> torch.Tensor:
    """(B, H, W) s * pred + t per image, (s, t) the least squares fit on the pixels with gt > 0."""
    mask = (gt > 0).float()
    a00, a01, a11 = (mask * pred * pred).sum((1, 2)), (mask * pred).sum((1, 2)), mask.sum((1, 2))
    b0, b1 = (mask * pred * gt).sum((1, 2)), (mask * gt).sum((1, 2))
    det = a00 * a11 - a01 * a01
    ok = det != 0
    scale, shift = torch.ones_like(b0), torch.zeros_like(b1)
    scale[ok] = (a11[ok] * b0[ok] - a01[ok] * b1[ok]) / det[ok]
    shift[ok] = (-a01[ok] * b0[ok] + a00[ok] * b1[ok]) / det[ok]
    return pred * scale.view(-1, 1, 1) + shift.view(-1, 1, 1)


def depth_metrics(pred: torch.Tensor, gt: torch.Tensor, scale_invariant: bool = False) -> dict[str, torch.Tensor]:
    """Each metric as a (B,) tensor from (B, 1, H, W) prediction and truth in metres."""
    pred, gt = pred[:, 0], gt[:, 0]
    if scale_invariant:
        pred = match_scale_and_shift(pred, gt)
    valid = (gt > 0).float()
    pred = pred * valid
    count = valid.sum(dim=(1, 2)).clamp(min=1)
    ratio = torch.maximum(gt / pred.clamp(min=1e-9), pred / gt.clamp(min=1e-9))
    out = {f"delta{k}": ((ratio < 1.25 ** k).float() * valid).sum(dim=(1, 2)) / count for k in (1, 2, 3)}
    out["rmse"] = (((gt - pred).pow(2) * valid).sum(dim=(1, 2)) / count).sqrt()
    return {m: out[m] for m in DEPTH_METRICS}
