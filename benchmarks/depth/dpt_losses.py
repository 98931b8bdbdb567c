"""Probe3D's depth training loss (evals/utils/losses.py, commit a1f1464).

Depth: 10 x SigLoss (sqrt(mean g^2 - 0.85 mean(g)^2), g = log(pred + 1e-3) - log(gt + 1e-3) over
the batch's pixels with gt > 0) + 0.5 x the multi-scale gradient loss, after ground truth beyond
max_depth is set to 0.
"""
from __future__ import annotations

import torch


def sig_loss(pred: torch.Tensor, gt: torch.Tensor, sigma: float = 0.85, eps: float = 1e-3) -> torch.Tensor:
    valid = gt > 0
    g = torch.log(pred[valid] + eps) - torch.log(gt[valid] + eps)
    return (g.pow(2).mean() - sigma * g.mean().pow(2)).sqrt()


def gradient_loss(pred: torch.Tensor, gt: torch.Tensor, eps: float = 1e-3) -> torch.Tensor:
    """Sum over four scales (every pixel, then every 2nd, 4th, 6th: losses.py's ``2 * i`` strides)
    of the masked absolute differences of the log error two pixels apart, vertical and horizontal,
    over the valid pixel count."""
    total = pred.new_zeros(())
    for step in (1, 2, 4, 6):
        p, t = pred[..., ::step, ::step], gt[..., ::step, ::step]
        valid = (t > 0).to(p.dtype)
        diff = (torch.log(p + eps) - torch.log(t + eps)) * valid
        v = (diff[..., :-2, :] - diff[..., 2:, :]).abs() * valid[..., :-2, :] * valid[..., 2:, :]
        h = (diff[..., :, :-2] - diff[..., :, 2:]).abs() * valid[..., :, :-2] * valid[..., :, 2:]
        total = total + (h.sum() + v.sum()) / valid.sum()
    return total


def depth_loss(pred: torch.Tensor, gt: torch.Tensor, max_depth: float = 10.0, weight_sig: float = 10.0,
               weight_grad: float = 0.5) -> torch.Tensor:
    gt = torch.where(gt > max_depth, torch.zeros_like(gt), gt)
    return weight_sig * sig_loss(pred, gt) + weight_grad * gradient_loss(pred, gt)
