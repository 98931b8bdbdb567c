"""A DINOv2-named checkpoint file for the position-embedding grid tests (tests/test_import_grid.py and
the segmentation folder's mmseg ViT test): one block, a narrow width, rough random position embeddings."""
from __future__ import annotations

import torch

PATCH, DIM, NATIVE = 14, 32, 518  # DINOv2's patch and training size, a narrow width


def official_file(tmp_path, registers: bool):
    """A DINOv2-named backbone (flat hub layout) with rough random position embeddings, where a
    second interpolation differs most from the first."""
    g = torch.Generator().manual_seed(0)
    r = lambda *s, scale=0.1: torch.randn(*s, generator=g) * scale  # noqa: E731
    grid = NATIVE // PATCH
    sd = {"cls_token": r(1, 1, DIM, scale=1.0), "pos_embed": r(1, 1 + grid * grid, DIM, scale=1.0),
          "patch_embed.proj.weight": r(DIM, 3, PATCH, PATCH), "patch_embed.proj.bias": r(DIM),
          "mask_token": torch.zeros(1, DIM), "norm.weight": 1 + r(DIM), "norm.bias": r(DIM)}
    b = "blocks.0."
    sd.update({b + "norm1.weight": 1 + r(DIM), b + "norm1.bias": r(DIM), b + "attn.qkv.weight": r(3 * DIM, DIM),
               b + "attn.qkv.bias": r(3 * DIM), b + "attn.proj.weight": r(DIM, DIM), b + "attn.proj.bias": r(DIM),
               b + "ls1.gamma": 1 + r(DIM), b + "ls2.gamma": 1 + r(DIM),
               b + "norm2.weight": 1 + r(DIM), b + "norm2.bias": r(DIM), b + "mlp.fc1.weight": r(4 * DIM, DIM),
               b + "mlp.fc1.bias": r(4 * DIM), b + "mlp.fc2.weight": r(DIM, 4 * DIM), b + "mlp.fc2.bias": r(DIM)})
    if registers:
        sd["register_tokens"] = r(1, 4, DIM, scale=1.0)
    path = tmp_path / f"dinov2_{'reg' if registers else 'plain'}_pretrain.pth"
    torch.save(sd, path)
    return path
