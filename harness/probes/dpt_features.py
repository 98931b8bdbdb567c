"""What the probe reads from a frozen backbone, as Probe3D's backbone wrappers give it
(evals/models/dino.py, ibot.py and utils.py, commit a1f1464, with ``return_multilayer=True``).

- Blocks: for n blocks, [n//4 - 1, n//2 - 1, n//4*3 - 1, n - 1] ([2, 5, 8, 11] of a ViT-B), the
  blocks' raw outputs (no final norm). A model with fewer than four blocks has no such list:
  ``blocks`` names four indices instead.
- Readout: ``dense`` the patch grid; ``dense_cls`` the patch grid with the class token repeated at
  every position, concatenated on the channels (the DINO and DINOv2 configs; the other backbones'
  configs read ``dense``).
- Padding: utils.center_padding before the backbone, zeros split evenly (the odd pixel at the
  bottom / right). Its quirk is kept: when only one side is off the stride, the other side is
  padded too, by a whole patch (patch_size - 0).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from harness.errors import ConfigError, NotApplicable


def probe3d_blocks(n_blocks: int) -> list[int]:
    return [n_blocks // 4 - 1, n_blocks // 2 - 1, n_blocks // 4 * 3 - 1, n_blocks - 1]


def blocks_for(n_blocks: int) -> list[int]:
    """Four blocks a model of ``n_blocks`` has: Probe3D's rule, each index at least 0 (a model with
    fewer than four blocks repeats them: [0, 0, 0, 0] for one)."""
    return [max(0, b) for b in probe3d_blocks(max(1, n_blocks))]


def _set_blocks(protocol: str, n_blocks: int) -> str:
    fit = ",".join(map(str, blocks_for(n_blocks)))
    return f"set blocks=[{fit}] (eval: --set blocks=[{fit}]; run: --set {protocol}.blocks=[{fit}])"


def chosen_blocks(blocks: list[int] | None, n_blocks: int, protocol: str, model: str | None = None) -> list[int]:
    """The four 0-based block indices, in depth order; refused with the fix when invalid."""
    chosen = probe3d_blocks(n_blocks) if blocks is None else list(blocks)
    who = f"model {model} has" if model else "the model has"
    if blocks is None and chosen[0] < 0:
        raise ConfigError(f"{protocol}: {who} {n_blocks} block(s), too few for Probe3D's block list "
                          f"(n//4 - 1 < 0); {_set_blocks(protocol, n_blocks)}")
    if len(chosen) != 4 or min(chosen) < 0 or chosen != sorted(chosen):
        raise ConfigError(f"{protocol}: blocks must be four non-negative indices in depth order, found {chosen}; "
                          f"{_set_blocks(protocol, n_blocks)}")
    if chosen[-1] >= n_blocks:
        # the list suits the suite's other models; a shallower one (the raw-pixel baseline) is skipped
        raise NotApplicable(f"{protocol} reads blocks {chosen}; {who} {n_blocks} block(s) "
                            f"(indices 0 to {n_blocks - 1}): {_set_blocks(protocol, n_blocks)}")
    return chosen


def center_padding(x: torch.Tensor, patch: int) -> torch.Tensor:
    h, w = x.shape[-2:]
    if h % patch == 0 and w % patch == 0:
        return x
    pad_h, pad_w = patch - h % patch, patch - w % patch
    top, left = pad_h // 2, pad_w // 2
    return F.pad(x, (left, pad_w - left, top, pad_h - top))


def block_features(backbone, images: torch.Tensor, blocks: list[int], readout: str) -> list[torch.Tensor]:
    """Four (B, C, h, w) maps: C = D (dense) or 2D (dense_cls)."""
    n = len(backbone.blocks) if hasattr(backbone, "blocks") else int(backbone.num_blocks)
    x = center_padding(images, int(backbone.patch_size))
    f = backbone.get_features(x, n_last_blocks=n - blocks[0], final_norm=False)
    out = []
    for b in blocks:
        grid = f.patches[:, b - blocks[0]].permute(0, 3, 1, 2).float()
        if readout == "dense_cls":
            cls = f.cls[:, b - blocks[0]].float()[:, :, None, None].expand(-1, -1, *grid.shape[-2:])
            grid = torch.cat([grid, cls], dim=1)
        out.append(grid.contiguous())
    return out
