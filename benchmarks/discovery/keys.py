"""The last block's keys (or queries, values) of a ViT's patches, as LOST reads them.

main_lost.py registers a forward hook on ``model.blocks[-1].attn.qkv`` and takes, from that
linear layer's output reshaped (B, N, 3, heads, head_dim), the keys with their heads
concatenated: exactly the middle third of the output's last dimension. The class token (and
any register token) is dropped; the rest are the patches in row-major order. Where a model keeps
its attention (timm, transformers, open_clip, inside their adapters) is harness.features.attention's
to know.
"""
from __future__ import annotations

import torch

from harness.features.attention import last_block_qkv, patch_tokens, require_attention

WHICH = {"q": 0, "k": 1, "v": 2}


def check_has_keys(backbone, method: str = "LOST", name: str | None = None) -> None:
    """NotApplicable unless the backbone is a ViT whose last attention block ssl-bench reads (a
    suite lists the pair as not applicable; ``eval`` prints the one error line)."""
    require_attention(backbone, method, name)


def last_block_features(backbone, x: torch.Tensor, which: str = "k", method: str = "LOST",
                        name: str | None = None) -> torch.Tensor:
    """(B, h*w, D) keys (``which`` = "k"), queries or values of the patches of ``x`` at the last
    block, from one forward pass of the backbone's feature path."""
    parts = last_block_qkv(backbone, x, method, name)
    return patch_tokens(parts[WHICH[which]], x, backbone.patch_size, method)
