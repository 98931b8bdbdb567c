"""The last block's keys (or queries, values) of a ViT's patches, as LOST reads them.

main_lost.py registers a forward hook on ``model.blocks[-1].attn.qkv`` and takes, from that
linear layer's output reshaped (B, N, 3, heads, head_dim), the keys with their heads
concatenated: exactly the middle third of the output's last dimension. The class token (and
any register token) is dropped; the rest are the patches in row-major order.
"""
from __future__ import annotations

import torch
from torch import nn

from harness.errors import ConfigError, NotApplicable

WHICH = {"q": 0, "k": 1, "v": 2}


def _vit_of(backbone) -> nn.Module | None:
    """The timm-style ViT inside a backbone: the harness ViT itself, or an adapter's model."""
    for candidate in (backbone, getattr(backbone, "model", None)):
        blocks = getattr(candidate, "blocks", None)
        if isinstance(blocks, (nn.Sequential, nn.ModuleList)) and len(blocks):
            attn = getattr(blocks[-1], "attn", None)
            if isinstance(getattr(attn, "qkv", None), nn.Linear):
                return candidate
    return None


def check_has_keys(backbone, method: str = "LOST") -> None:
    """NotApplicable unless the backbone is a ViT whose last block has a fused qkv projection (a
    suite skips the model; ``eval`` prints the one error line)."""
    if _vit_of(backbone) is None:
        raise NotApplicable(f"{method} needs a ViT's keys (the last block's attn.qkv), and the model "
                          f"{getattr(backbone, 'arch', type(backbone).__name__)!r} has none (a CNN or "
                          f"another architecture); evaluate a ViT")


def last_block_features(backbone, x: torch.Tensor, which: str = "k", method: str = "LOST") -> torch.Tensor:
    """(B, h*w, D) keys (``which`` = "k"), queries or values of the patches of ``x`` at the last
    block, from one forward pass of the backbone's feature path."""
    vit = _vit_of(backbone)
    if vit is None:
        check_has_keys(backbone, method)
    caught: dict[str, torch.Tensor] = {}
    handle = vit.blocks[-1].attn.qkv.register_forward_hook(
        lambda module, inputs, output: caught.__setitem__("qkv", output))
    try:
        backbone.get_features(x, n_last_blocks=1, norm=True)
    finally:
        handle.remove()
    if "qkv" not in caught:
        raise ConfigError(f"{method} needs a ViT's keys: the last block's attn.qkv was not called in the "
                          "forward pass (an attention computing q, k, v another way)")
    qkv = caught["qkv"]
    b, n, three_d = qkv.shape
    d = three_d // 3
    h, w = x.shape[-2] // backbone.patch_size, x.shape[-1] // backbone.patch_size
    prefix = n - h * w
    if prefix < 0:
        raise ConfigError(f"the last block saw {n} tokens, fewer than the {h}x{w} patch grid")
    part = WHICH[which]
    return qkv[:, prefix:, part * d:(part + 1) * d]
