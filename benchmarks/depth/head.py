"""The depth probe: a BatchNorm + 1x1 convolution over the patch grid, its 256 logits turned into
a depth as a weighted sum of depth bins, the scale-invariant log loss and DINOv3's warm-up
one-cycle schedule.

Written from dinov3/eval/depth (commit 6876159): models/linear_head.py (LinearHead),
models/__init__.py (FeaturesToDepth), loss.py (SigLoss), schedulers.py (WarmupOneCycleLR); the
DINOv2 ``linear4`` variant (no BatchNorm, features upsampled x4, PyTorch's default convolution
init) from dinov2 (commit b8931f7) hub/depth/decode_heads.py BNHead.
"""
from __future__ import annotations

import math

import torch
from torch import nn

from harness.probes.depth_bins import bins_to_depth


class LinearDepthHead(nn.Module):
    """BatchNorm over the concatenated layers (each optionally with its class token broadcast
    over the grid), then a 1x1 convolution to ``n_bins`` logits at the patch resolution, or at
    ``upsample`` times it (DINOv2's BNHead: every layer resized bilinearly to 4x the first one's
    grid before the concatenation)."""

    def __init__(self, embed_dims: list[int], n_bins: int = 256, batchnorm: bool = True,
                 cls_token: bool = False, upsample: int = 1, conv_init: str = "normal"):
        super().__init__()
        channels = sum(embed_dims) * (2 if cls_token else 1)
        self.cls_token, self.upsample = cls_token, upsample
        # one process here: BatchNorm2d computes what SyncBatchNorm does on one rank
        self.bn = nn.BatchNorm2d(channels) if batchnorm else nn.Identity()
        self.conv = nn.Conv2d(channels, n_bins, kernel_size=1)
        if conv_init == "normal":  # dinov3 linear_head.py: weight ~ N(0, 0.01), bias 0
            nn.init.normal_(self.conv.weight, mean=0.0, std=0.01)
            nn.init.constant_(self.conv.bias, 0.0)
        elif conv_init != "default":  # "default": nn.Conv2d's own init, as dinov2's BNHead keeps it
            raise ValueError(f"conv_init must be 'normal' or 'default', found {conv_init!r}")

    def forward(self, patches: list[torch.Tensor], cls: list[torch.Tensor] | None = None) -> torch.Tensor:
        """``patches``: per layer (B, D, h, w); ``cls``: per layer (B, D), used with cls_token."""
        maps = []
        for i, x in enumerate(patches):
            if self.cls_token:
                maps.append(torch.cat([x, cls[i][:, :, None, None].expand_as(x)], dim=1))
            else:
                maps.append(x)
        size = maps[0].shape[2:]
        if self.upsample != 1:  # dinov2 BNHead._transform_inputs: every map resized, the first too
            size = tuple(s * self.upsample for s in size)
            maps = [nn.functional.interpolate(m, size=size, mode="bilinear", align_corners=False) for m in maps]
        # the first layer's grid is everyone's (linear_head.py _transform_inputs, "resize")
        maps = [m if m.shape[2:] == size else
                nn.functional.interpolate(m, size=size, mode="bilinear", align_corners=False) for m in maps]
        return self.conv(self.bn(torch.cat(maps, dim=1)))


def logits_to_depth(logits: torch.Tensor, min_depth: float, max_depth: float, bins: str = "linear",
                    norm: str = "linear") -> torch.Tensor:
    """(B, n_bins, h, w) logits -> (B, 1, h, w) depth: the bins weighted by normalised logits.
    ``norm`` "linear" (DINOv3's default, after AdaBins): relu(x) + 0.1, divided by its sum;
    "softmax"; "sigmoid" (divided by its sum). One channel: relu(x) + min_depth (regression)."""
    if logits.shape[1] == 1:
        return torch.relu(logits) + min_depth
    return bins_to_depth(logits, min_depth, max_depth, bins, norm)


class SILogLoss:
    """Scale-invariant log loss (loss.py SigLoss, after AdaBins/BinsFormer): with
    g = log(pred + eps) - log(gt + eps) over the valid pixels of the whole batch,
    sqrt(var(g) + lam * mean(g)^2), var with Bessel's correction (torch.var). For its first
    ``warm_iter`` calls the variance is left out (sqrt(lam * mean(g)^2)). Stateful: it counts its
    calls, as the official module does."""

    def __init__(self, lam: float = 0.15, warm_iter: int = 100, eps: float = 0.001):
        self.lam, self.warm_iter, self.eps = lam, warm_iter, eps
        self.calls = 0

    def __call__(self, pred: torch.Tensor, gt: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
        g = torch.log(pred[valid] + self.eps) - torch.log(gt[valid] + self.eps)
        loss = self.lam * torch.mean(g) ** 2
        if self.calls < self.warm_iter:
            self.calls += 1
        else:
            loss = loss + torch.var(g)
        if loss <= 0:
            return torch.abs(loss)
        return torch.sqrt(loss)


def _cos(start: float, end: float, pct: float) -> float:
    return end + (start - end) / 2.0 * (math.cos(math.pi * pct) + 1)


def warmup_one_cycle(step: int, max_lr: float, total: int, warmup: int, *, div_factor: float = 25.0,
                     final_div_factor: float = 1000.0, base_momentum: float = 0.85,
                     max_momentum: float = 0.95) -> tuple[float, float]:
    """(lr, Adam beta1) of training step ``step`` (0-based) under schedulers.py's
    WarmupOneCycleLR (cosine annealing, use_beta1). During the warm-up the learning rate rises
    from max_lr / final_div_factor as max_lr * (1 + cos(pi t / total)) / 2 * t / warmup, and beta1
    is 0 (the official scheduler sets the momentum to 0 there); then the rate anneals by a cosine
    from max_lr to max_lr / div_factor / final_div_factor at (t + 1) / total, and beta1 from
    base_momentum to max_momentum."""
    if step < warmup:
        gmax = max_lr * (1 + math.cos(math.pi * step / float(total))) / 2
        return max_lr / final_div_factor + gmax * step / float(warmup), 0.0
    pct = (step - warmup) / float(total - warmup)
    min_lr = max_lr / div_factor / final_div_factor
    return _cos(max_lr, min_lr, (step + 1) / float(total)), _cos(base_momentum, max_momentum, pct)


def set_schedule(optimizer: torch.optim.Optimizer, lr: float, beta1: float) -> None:
    for group in optimizer.param_groups:
        group["lr"] = lr
        group["betas"] = (beta1, *group["betas"][1:])
