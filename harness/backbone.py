"""ViT backbones (timm) with the one feature API every protocol uses.

`ViTBackbone` is a timm ``VisionTransformer`` so parameter names are timm's, which
are also the names the official DINO / iBOT / CrIBo / SynCLR checkpoints use.
Two additions: position embeddings are interpolated the way the official code
does (timm's own resampling is antialiased and gives different features at any
size other than the training size), and an optional learned mask token for
masked-image-modelling students.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import torch
import torch.nn.functional as F
from timm.models.vision_transformer import VisionTransformer
from torch import nn

from harness.errors import ConfigError

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
}
# Keys a user may override per model (the rest define the architecture's identity).
ARCH_KEYS = ("img_size", "patch_size", "embed_dim", "depth", "num_heads", "mlp_ratio", "reg_tokens")

PosInterp = Literal["official", "timm"]


@dataclass
class BackboneFeatures:
    """Features of the last n blocks, oldest block first."""

    cls: torch.Tensor  # (B, n, d)
    patches: torch.Tensor  # (B, n, h, w, d)

    @property
    def grid(self) -> tuple[int, int]:
        return tuple(self.patches.shape[2:4])


class ViTBackbone(VisionTransformer):
    def __init__(self, arch: str = "custom", *, pos_interp: PosInterp = "official",
                 use_mask_token: bool = False, **kwargs):
        kwargs.setdefault("num_classes", 0)
        kwargs.setdefault("dynamic_img_size", True)
        super().__init__(**kwargs)
        self.arch = arch
        self.arch_kwargs = {k: kwargs[k] for k in ARCH_KEYS if k in kwargs}
        self.pos_interp = pos_interp
        self.patch_size = self.patch_embed.patch_size[0]
        # The mask token belongs to the student only (iBOT's `masked_embed`); teachers
        # and exported backbones do not have it.
        self.mask_token = nn.Parameter(torch.zeros(1, self.embed_dim)) if use_mask_token else None

    # ------------------------------------------------------------------ embeddings
    def interpolate_pos_embed(self, h: int, w: int) -> torch.Tensor:
        """Position embeddings for an h x w patch grid, prefix tokens first."""
        n_prefix = 0 if self.no_embed_class else self.num_prefix_tokens
        prefix, grid = self.pos_embed[:, :n_prefix], self.pos_embed[:, n_prefix:]
        g0 = self.patch_embed.grid_size
        if (h, w) == tuple(g0):
            return self.pos_embed
        if self.pos_interp == "timm":
            from timm.layers import resample_abs_pos_embed

            return resample_abs_pos_embed(self.pos_embed, new_size=(h, w), old_size=g0,
                                          num_prefix_tokens=n_prefix)
        # Official DINO/iBOT/CrIBo interpolation: scale factors with the +0.1 offset that
        # avoids floating-point truncation, bicubic, no antialias.
        n = grid.shape[1]
        side = int(math.sqrt(n))
        if side * side != n:
            raise ConfigError(f"official position interpolation needs a square grid, found {n} tokens")
        dim = grid.shape[-1]
        grid = grid.reshape(1, side, side, dim).permute(0, 3, 1, 2)
        grid = F.interpolate(grid.float(), scale_factor=((h + 0.1) / side, (w + 0.1) / side),
                             mode="bicubic", align_corners=False)
        if grid.shape[-2:] != (h, w):
            raise RuntimeError(f"position interpolation gave {tuple(grid.shape[-2:])}, expected {(h, w)}")
        grid = grid.to(self.pos_embed.dtype).permute(0, 2, 3, 1).reshape(1, h * w, dim)
        return torch.cat([prefix, grid], dim=1)

    def _pos_embed(self, x: torch.Tensor) -> torch.Tensor:
        b, h, w, c = x.shape
        pos = self.interpolate_pos_embed(h, w)
        x = x.reshape(b, h * w, c)
        prefix = []
        if self.cls_token is not None:
            prefix.append(self.cls_token.expand(b, -1, -1))
        if self.reg_token is not None:
            prefix.append(self.reg_token.expand(b, -1, -1))
        if self.no_embed_class:
            x = torch.cat(prefix + [x + pos], dim=1)
        else:
            x = torch.cat(prefix + [x], dim=1) + pos
        return self.pos_drop(x)

    def prepare_tokens(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        self._check_input(x)
        x = self.patch_embed(x)  # (B, h, w, d)
        if mask is not None:
            if self.mask_token is None:
                raise ConfigError("a mask was given but this backbone has no mask token "
                                  "(build it with use_mask_token=True)")
            if mask.shape != x.shape[:3]:
                raise ValueError(f"mask shape {tuple(mask.shape)} != patch grid {tuple(x.shape[:3])}")
            x = torch.where(mask.unsqueeze(-1), self.mask_token.to(x.dtype), x)
        x = self._pos_embed(x)
        x = self.patch_drop(x)
        return self.norm_pre(x)

    def _check_input(self, x: torch.Tensor) -> None:
        if x.ndim != 4 or x.shape[1] != 3:
            raise ValueError(f"expected images (B, 3, H, W), found {tuple(x.shape)}")
        h, w = x.shape[-2:]
        if h % self.patch_size or w % self.patch_size:
            raise ValueError(f"input {h}x{w} is not a multiple of the patch size {self.patch_size}")

    # ------------------------------------------------------------------ forward
    def forward_tokens(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        """Final-normed tokens (B, prefix + h*w, d)."""
        x = self.prepare_tokens(x, mask)
        x = self.blocks(x)
        return self.norm(x)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:  # type: ignore[override]
        return self.forward_tokens(x, mask)

    def get_features(self, x: torch.Tensor, n_last_blocks: int = 1, norm: bool = True) -> BackboneFeatures:
        if not 1 <= n_last_blocks <= len(self.blocks):
            raise ValueError(f"n_last_blocks must be in [1, {len(self.blocks)}], found {n_last_blocks}")
        h, w = x.shape[-2] // self.patch_size, x.shape[-1] // self.patch_size
        x = self.prepare_tokens(x)
        outs = []
        first_kept = len(self.blocks) - n_last_blocks
        for i, blk in enumerate(self.blocks):
            x = blk(x)
            if i >= first_kept:
                outs.append(self.norm(x) if norm else x)
        # (B, n, T, d); one block (the common case) is a view, not a copy
        tokens = outs[0].unsqueeze(1) if len(outs) == 1 else torch.stack(outs, dim=1)
        cls = tokens[:, :, 0]
        patches = tokens[:, :, self.num_prefix_tokens:]
        b, n, _, d = patches.shape
        return BackboneFeatures(cls=cls, patches=patches.reshape(b, n, h, w, d))

    def backbone_state_dict(self) -> dict[str, torch.Tensor]:
        """The state dict without the student-only mask token."""
        return {k: v for k, v in self.state_dict().items() if k != "mask_token"}


def arch_kwargs_for(arch: str, **overrides) -> dict:
    if arch not in ARCHS and not overrides:
        raise ConfigError(f"unknown architecture {arch!r}; known: {', '.join(sorted(ARCHS))}")
    kwargs = dict(ARCHS.get(arch, {}))
    kwargs.update({k: v for k, v in overrides.items() if v is not None})
    return kwargs


def create_backbone(arch: str, *, drop_path_rate: float = 0.0, pos_interp: PosInterp = "official",
                    use_mask_token: bool = False, **overrides) -> ViTBackbone:
    """Build a backbone from a preset name, optionally overriding architecture keys."""
    unknown = set(overrides) - set(ARCH_KEYS)
    if unknown:
        raise ConfigError(f"unknown backbone setting(s) {sorted(unknown)}; allowed: {list(ARCH_KEYS)}")
    kwargs = arch_kwargs_for(arch, **overrides)
    return ViTBackbone(arch, pos_interp=pos_interp, use_mask_token=use_mask_token,
                       drop_path_rate=drop_path_rate, **kwargs)
