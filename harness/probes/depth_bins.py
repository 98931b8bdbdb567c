"""Depth from a probe's per-pixel bin scores, as the depth probes read it (after AdaBins: DINOv3
eval/depth models/__init__.py FeaturesToDepth, Probe3D evals/models/probes.py DepthBinPrediction):
bin centres over [min_depth, max_depth] and the scores turned into weights over them."""
from __future__ import annotations

import torch


def depth_bins(n_bins: int, min_depth: float, max_depth: float, strategy: str = "linear",
               device=None, dtype: torch.dtype | None = None) -> torch.Tensor:
    """Bin centres: evenly spaced in depth ("linear", the default) or in log depth ("log"), in
    ``dtype`` (None: torch's default)."""
    if strategy == "linear":
        return torch.linspace(min_depth, max_depth, n_bins, device=device, dtype=dtype)
    if strategy == "log":
        lo, hi = torch.log(torch.tensor(min_depth)), torch.log(torch.tensor(max_depth))
        return torch.exp(torch.linspace(lo, hi, n_bins, device=device, dtype=dtype))
    raise ValueError(f"bins strategy must be 'linear' or 'log', found {strategy!r}")


def bin_weights(logits: torch.Tensor, norm: str = "linear") -> torch.Tensor:
    """(B, K, h, w) scores -> weights summing to one over K: "linear" (AdaBins, both papers' default)
    relu(x) + 0.1 divided by its sum; "softmax"; "sigmoid" divided by its sum."""
    if norm == "linear":
        w = torch.relu(logits) + 0.1
        return w / w.sum(dim=1, keepdim=True)
    if norm == "softmax":
        return torch.softmax(logits, dim=1)
    if norm == "sigmoid":
        w = torch.sigmoid(logits)
        return w / w.sum(dim=1, keepdim=True)
    raise ValueError(f"bin_norm must be linear, softmax or sigmoid, found {norm!r}")


def bins_to_depth(logits: torch.Tensor, min_depth: float, max_depth: float, bins: str = "linear",
                  norm: str = "linear", centres_dtype: torch.dtype | None = None) -> torch.Tensor:
    """(B, K, h, w) scores -> (B, 1, h, w) depth: the bin centres weighted by :func:`bin_weights`."""
    centres = depth_bins(logits.shape[1], min_depth, max_depth, bins, device=logits.device, dtype=centres_dtype)
    return torch.einsum("bkhw,k->bhw", bin_weights(logits, norm), centres).unsqueeze(1)
