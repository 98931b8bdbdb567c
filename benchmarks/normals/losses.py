"""Probe3D's training losses (evals/utils/losses.py, commit a1f1464).

Normals: the angle between prediction and truth, acos of the cosine clamped to 1e-4 inside
[-1, 1]; with a fourth channel, Bae et al.'s uncertainty-aware form with kappa = elu(c4) + 1.01:
log(1 + exp(-pi kappa)) - log(1 + kappa^2) + kappa * angle. Mean over the valid pixels of the
batch (pooled, not per image).
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F


def angular_loss(pred: torch.Tensor, target: torch.Tensor, valid: torch.Tensor, eps: float = 1e-4) -> torch.Tensor:
    """pred (B, 3 or 4, H, W), target (B, 3, H, W), valid (B, H, W) bool."""
    angle = F.cosine_similarity(pred[:, :3], target, dim=1).clamp(-1 + eps, 1 - eps).acos()
    if pred.shape[1] == 4:
        kappa = F.elu(pred[:, 3]) + 1.01
        reg = torch.log(1 + torch.exp(-kappa * math.pi)) - torch.log(kappa.pow(2) + 1)
        angle = reg + kappa * angle
    return angle[valid].mean()
