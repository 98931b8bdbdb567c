"""The ViT architectures by name and what a backbone's features are, without timm: the modules
that only need to know an architecture (the zoo, checkpoints' metadata, the context rows) import
this, and timm is imported only where a ViT is built (harness.models.backbone)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch

from harness.errors import ConfigError

# DINOv2 (facebookresearch/dinov2, hub/backbones.py `_make_dinov2_model`): patch 14, trained
# and released at img_size 518 (a 37 x 37 grid), layer scale (the hub builds it with
# init_values 1.0; the released weights replace it), final norm kept. Without registers the
# position embeddings are interpolated like DINO's (bicubic, scale factor (g + 0.1) / sqrt(N),
# no antialias); the `_reg` models are built with interpolate_offset=0.0 and
# interpolate_antialias=True, i.e. bicubic to the target size *with* antialias. Register
# tokens get no position embedding: the CLS token keeps its own, folded into `cls_token` at
# import (`no_embed_class`, as timm's dinov2 models do), so the pos_embed holds the grid only.
_DINOV2 = dict(img_size=518, patch_size=14, init_values=1.0)
_DINOV2_REG = dict(_DINOV2, reg_tokens=4, no_embed_class=True, pos_interp_offset=0.0, pos_interp_antialias=True)

# arch name -> constructor kwargs. Names follow timm; `vit_cpu_tiny` is the CPU preset
# that learns within minutes on 2 cores (see docs/BENCHMARKS.md).
ARCHS: dict[str, dict] = {
    "vit_cpu_tiny": dict(img_size=64, patch_size=8, embed_dim=64, depth=3, num_heads=2),
    "vit_tiny_patch16_224": dict(img_size=224, patch_size=16, embed_dim=192, depth=12, num_heads=3),
    "vit_small_patch16_224": dict(img_size=224, patch_size=16, embed_dim=384, depth=12, num_heads=6),
    "vit_small_patch8_224": dict(img_size=224, patch_size=8, embed_dim=384, depth=12, num_heads=6),
    "vit_base_patch16_224": dict(img_size=224, patch_size=16, embed_dim=768, depth=12, num_heads=12),
    "vit_base_patch8_224": dict(img_size=224, patch_size=8, embed_dim=768, depth=12, num_heads=12),
    "vit_large_patch16_224": dict(img_size=224, patch_size=16, embed_dim=1024, depth=24, num_heads=16),
    "vit_large_patch14_224": dict(img_size=224, patch_size=14, embed_dim=1024, depth=24, num_heads=16),
    "vit_huge_patch14_224": dict(img_size=224, patch_size=14, embed_dim=1280, depth=32, num_heads=16),
    "vit_small_patch14_dinov2": dict(_DINOV2, embed_dim=384, depth=12, num_heads=6),
    "vit_base_patch14_dinov2": dict(_DINOV2, embed_dim=768, depth=12, num_heads=12),
    "vit_large_patch14_dinov2": dict(_DINOV2, embed_dim=1024, depth=24, num_heads=16),
    # ViT-g/14 ("vit_giant2"): SwiGLU feed-forward (hidden 4096 = the fused formula of mlp ratio 4)
    "vit_giant_patch14_dinov2": dict(_DINOV2, embed_dim=1536, depth=40, num_heads=24, ffn_layer="swiglufused"),
    "vit_small_patch14_reg4_dinov2": dict(_DINOV2_REG, embed_dim=384, depth=12, num_heads=6),
    "vit_base_patch14_reg4_dinov2": dict(_DINOV2_REG, embed_dim=768, depth=12, num_heads=12),
    "vit_large_patch14_reg4_dinov2": dict(_DINOV2_REG, embed_dim=1024, depth=24, num_heads=16),
    "vit_giant_patch14_reg4_dinov2": dict(_DINOV2_REG, embed_dim=1536, depth=40, num_heads=24,
                                          ffn_layer="swiglufused"),
}
# Keys a user may override per model (the rest define the architecture's identity).
# init_values: layer scale (ls1/ls2.gamma) when set; reg_tokens: register tokens;
# no_embed_class: pos_embed covers the patch grid only (prefix tokens carry their own);
# ffn_layer: "mlp" or DINOv2's "swiglufused"; pos_interp_offset / pos_interp_antialias: how
# pos_embed is resized for another grid, as DINOv2's interpolate_offset / interpolate_antialias
# (offset > 0: bicubic with scale factor (g + offset) / sqrt(N); 0: bicubic to the size).
# native_img_size: the input size the position embeddings were trained at, set when pos_embed
# was resized to img_size at import; the backbone then also holds the trained table
# (`pos_embed_native`) and resizes from it for any other size, so that a run at a third size
# interpolates once from the trained grid, as the official model does.
ARCH_KEYS = ("img_size", "patch_size", "embed_dim", "depth", "num_heads", "mlp_ratio", "reg_tokens",
             "init_values", "no_embed_class", "ffn_layer", "pos_interp_offset", "pos_interp_antialias",
             "native_img_size")
FFN_LAYERS = ("mlp", "swiglufused")
DEFAULT_POS_INTERP = {"pos_interp_offset": 0.1, "pos_interp_antialias": False}

PosInterp = Literal["official", "timm"]


def swiglu_hidden(dim: int, mlp_ratio: float = 4.0) -> int:
    """DINOv2's SwiGLUFFNFused width: (int(hidden * 2 / 3) + 7) // 8 * 8 of hidden = dim x ratio."""
    return (int(int(dim * mlp_ratio) * 2 / 3) + 7) // 8 * 8


@dataclass
class BackboneFeatures:
    """Features of the last n blocks, oldest block first."""

    cls: torch.Tensor  # (B, n, d)
    patches: torch.Tensor  # (B, n, h, w, d)  -- never the register tokens
    registers: torch.Tensor | None = None  # (B, n, r, d) for backbones with register tokens

    @property
    def grid(self) -> tuple[int, int]:
        return tuple(self.patches.shape[2:4])


def arch_kwargs_for(arch: str, **overrides) -> dict:
    if arch not in ARCHS and not overrides:
        raise ConfigError(f"unknown architecture {arch!r}; known: {', '.join(sorted(ARCHS))}")
    kwargs = dict(ARCHS.get(arch, {}))
    kwargs.update({k: v for k, v in overrides.items() if v is not None})
    return kwargs
