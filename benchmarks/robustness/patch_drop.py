"""Occlusion by patch drop (Naseer et al. 2021, "Intriguing Properties of Vision Transformers";
the ``--dino`` branch of their evaluate.py, copied into bytedance/ibot @ da316d8
analysis/occlusion/eval.py, which produced iBOT Table 8's occlusion numbers).

Saliency is the last block's attention of the [CLS] token to the patches, of one head (head 1),
of a DINO ViT-S/16 (``dino_small(pretrained=True)``: dino_deitsmall16_pretrain.pth) on the
normalised image. Sorting the patches by attention, the salient set is the fewest patches that
hold ``mass`` of the attention (``cumsum(sorted ascending) > 1 - mass``). Dropping sets pixels
of the normalised image to zero over whole patches (nearest upsampling of the patch mask):
``salient`` drops the salient set (``img * (1 - mask)``), ``non_salient`` drops everything else
(``img * mask``). The paper's "information loss 0.5" is ``drop_lambda = 0.5`` (the attention
mass); the fraction of pixels actually dropped is recorded beside the accuracy, as the script
prints it ("information loss ratio").
"""
from __future__ import annotations

import torch
from torch import nn

from harness.errors import ConfigError
from harness.features import attention

DROPS = ("salient", "non_salient")


def salient_patches(attention: torch.Tensor, mass: float) -> torch.Tensor:
    """(B, N) bool: the patches that hold the top ``mass`` of each row's attention."""
    val, idx = torch.sort(attention, dim=1)
    val = val / val.sum(dim=1, keepdim=True)
    top = torch.cumsum(val, dim=1) > (1 - mass)
    return torch.gather(top, 1, torch.argsort(idx, dim=1))


def drop_patches(images: torch.Tensor, salient: torch.Tensor, grid: tuple[int, int], drop: str,
                 fill: torch.Tensor | None = None):
    """(images with patches dropped, fraction of patches dropped per image). Dropped pixels are 0
    (iBOT's ``img * mask`` on the normalised image), or ``fill`` per channel where given."""
    if drop not in DROPS:
        raise ConfigError(f"occlusion drop must be one of {DROPS}, found {drop!r}")
    h, w = grid
    b, _, height, width = images.shape
    keep = ~salient if drop == "salient" else salient
    mask = keep.float().reshape(b, 1, h, w)
    mask = nn.functional.interpolate(mask, scale_factor=(height // h, width // w), mode="nearest")
    out = images * mask
    if fill is not None:
        out = out + (1 - mask) * fill.to(images).view(1, -1, 1, 1)
    return out, 1.0 - keep.float().mean(1)


def require_attention(backbone, name: str | None = None) -> None:
    """NotApplicable unless the backbone (or the model inside its adapter) has the last attention
    block the saliency reads (harness.features.attention)."""
    attention.require_attention(backbone, "occlusion (the [CLS] attention saliency)", name)


def cls_attention(backbone, x: torch.Tensor, head: int) -> torch.Tensor:
    """(B, h*w): the last block's attention of [CLS] to each patch, for one head, as DINO's
    ``forward_selfattention`` returns it (softmax(q k^T x scale), registers left out)."""
    return attention.cls_attention_rows(backbone, x, head, "occlusion saliency")
