"""Which transformer blocks feed the depth head.

``last``: the last ``layers`` blocks (DINOv3's ``backbone_out_layers`` LAST / FOUR_LAST).
``dinov2``: the blocks dinov2's hub depther reads (hub/depthers.py ``out_index``, commit
b8931f7): for four layers [2, 5, 8, 11] of a 12-block ViT-S/B, [4, 11, 17, 23] of a 24-block
ViT-L and [9, 19, 29, 39] of a 40-block ViT-g; for one layer the last block. Other depths, which
dinov2 does not define, take ``layers`` evenly spaced blocks ending at the last
(n (i + 1) // layers - 1, which gives the ViT-S/B and ViT-g lists).
"""
from __future__ import annotations

from harness.errors import ConfigError

DINOV2_OUT_INDEX = {12: [2, 5, 8, 11], 24: [4, 11, 17, 23], 40: [9, 19, 29, 39]}


def block_indices(choice: str, layers: int, n_blocks: int) -> list[int]:
    """0-based indices of the blocks whose outputs the head reads, in depth order."""
    if layers > n_blocks:
        raise ConfigError(f"depth_linear: layers {layers} but the model has {n_blocks} blocks")
    if choice == "last" or layers == 1:
        return list(range(n_blocks - layers, n_blocks))
    if choice != "dinov2":
        raise ConfigError(f"depth_linear: blocks must be 'last' or 'dinov2', found {choice!r}")
    if layers == 4 and n_blocks in DINOV2_OUT_INDEX:
        return list(DINOV2_OUT_INDEX[n_blocks])
    return [n_blocks * (i + 1) // layers - 1 for i in range(layers)]
