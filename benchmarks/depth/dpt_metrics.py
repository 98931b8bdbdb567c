"""Probe3D's evaluation metrics per image (evals/utils/metrics.py, commit a1f1464); the data set's
number is the mean over test images of each image's value (train_*.py validate: the per-image
values of every batch concatenated, then averaged).

Depth (``evaluate_depth``): per image RMSE and delta < 1.25, 1.25^2, 1.25^3 over pixels with
gt > 0; the prediction is zeroed outside them first, as there. train_depth.py also evaluates
"scale-aligned" (``scale_invariant=True``): each prediction first mapped by the least-squares scale
and shift onto the truth's valid pixels (``match_scale_and_shift``; left as is where the system is
singular), not clamped afterwards.
"""
from __future__ import annotations

import torch

DEPTH_METRICS = ("rmse", "delta1", "delta2", "delta3")


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
