"""Probe3D's DPT probe (evals/models/probes.py, commit a1f1464): four feature maps, each projected
by a 1x1 convolution to ``hidden_dim`` and upsampled x2, fused from the deepest up by residual
convolution units, upsampled x4, two 3x3 convolutions, upsampled x2 (bilinear, corners aligned).

Unlike the original DPT, every map stays at the patch grid's resolution (x2): the fusion blocks add
maps of one size and resample nothing, so the output is 16 x the patch grid whatever the stride.
"""
from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F


def _up(x: torch.Tensor, factor: int) -> torch.Tensor:
    return F.interpolate(x, scale_factor=factor, mode="bilinear", align_corners=True)


class ResidualConvUnit(nn.Module):
    """x + relu(conv(relu(conv(x)))), padding keeping the size (probes.py ResidualConvUnit)."""

    def __init__(self, dim: int, kernel_size: int):
        super().__init__()
        pad = kernel_size // 2
        self.conv = nn.Sequential(nn.Conv2d(dim, dim, kernel_size, padding=pad), nn.ReLU(True),
                                  nn.Conv2d(dim, dim, kernel_size, padding=pad), nn.ReLU(True))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(x) + x


class FusionBlock(nn.Module):
    """unit2(unit1(x) + skip), or unit2(x) for the deepest map, which has no skip."""

    def __init__(self, dim: int, kernel_size: int, with_skip: bool = True):
        super().__init__()
        self.unit1 = ResidualConvUnit(dim, kernel_size) if with_skip else None
        self.unit2 = ResidualConvUnit(dim, kernel_size)

    def forward(self, x: torch.Tensor, skip: torch.Tensor | None = None) -> torch.Tensor:
        if skip is not None:
            x = self.unit1(x) + skip
        return self.unit2(x)


class DPTHead(nn.Module):
    """(B, out_dim, 16h, 16w) from four (B, C_i, h, w) maps, shallowest first."""

    def __init__(self, in_dims: list[int], out_dim: int, hidden_dim: int = 512, kernel_size: int = 3):
        super().__init__()
        if len(in_dims) != 4:
            raise ValueError(f"the DPT probe reads four feature maps, found {len(in_dims)}")
        self.proj = nn.ModuleList(nn.Conv2d(d, hidden_dim, 1) for d in in_dims)
        self.fuse = nn.ModuleList(FusionBlock(hidden_dim, kernel_size, with_skip=i < 3) for i in range(4))
        self.out_conv = nn.Sequential(nn.Conv2d(hidden_dim, hidden_dim, 3, padding=1), nn.ReLU(True),
                                      nn.Conv2d(hidden_dim, out_dim, 3, padding=1))

    def forward(self, feats: list[torch.Tensor]) -> torch.Tensor:
        maps = [_up(p(f), 2) for p, f in zip(self.proj, feats)]
        out = self.fuse[3](maps[3])
        for i in (2, 1, 0):
            out = self.fuse[i](maps[i], out)
        return _up(self.out_conv(_up(out, 4)), 2)


def official_state_dict(head: DPTHead) -> dict[str, torch.Tensor]:
    """The head's weights under probes.py's names (``conv_i``, ``ref_i.resConfUnit{1,2}``,
    ``out_conv``), so that one initialisation loads into either implementation."""
    out = {}
    for name, value in head.state_dict().items():
        parts = name.split(".")
        if parts[0] == "proj":
            name = f"conv_{parts[1]}." + ".".join(parts[2:])
        elif parts[0] == "fuse":
            unit = {"unit1": "resConfUnit1", "unit2": "resConfUnit2"}[parts[2]]
            name = f"ref_{parts[1]}.{unit}." + ".".join(parts[3:])
        out[name] = value
    return out

