"""An open_clip image tower (its ``VisionTransformer``) as a feature backbone.

The global feature is what ``model.encode_image`` returns: the pooled token (class token, or
the patch mean for ``pool_type: avg``) after ``ln_post``, times the projection ``proj``. The
patch grid is the patch tokens through the same ``ln_post`` and ``proj`` (as MaskCLIP reads
CLIP's dense features), so both live in one space of width ``embed_dim``; ``final_norm=False`` leaves
out ``ln_post``. Each of the last n blocks is read the same way.

Position embeddings: on the trained grid the tower runs exactly its own ``_embeds``; on another
grid the table is resized as open_clip resizes it when loading a checkpoint for another image
size (``open_clip.model.resize_pos_embed``: bicubic, antialias, the class token kept).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from harness.errors import ConfigError
from harness.models.backbone import BackboneFeatures
from harness.models.feature_backbone import AdaptedBackbone, InputNorm


class OpenClipBackbone(AdaptedBackbone):
    adapter_name = "open_clip"

    def __init__(self, visual: nn.Module, name: str, input_norm: InputNorm, norm_source: str):
        from open_clip.transformer import VisionTransformer

        if not isinstance(visual, VisionTransformer):
            raise ConfigError(f"open_clip:{name}: its image tower is a {type(visual).__name__}; ssl-bench reads "
                              f"open_clip's ViT towers (VisionTransformer) only: evaluate a ResNet or timm tower "
                              f"through timm: or code:")
        if visual.attn_pool is not None or visual.final_ln_after_pool or visual.pool_type not in ("tok", "avg"):
            raise ConfigError(f"open_clip:{name}: a tower with attention pooling or ln_post after the pool is not "
                              f"read (its patch tokens and pooled feature are not one space)")
        patch = visual.patch_size[0] if isinstance(visual.patch_size, (tuple, list)) else visual.patch_size
        width = int(visual.proj.shape[1]) if visual.proj is not None else int(visual.positional_embedding.shape[-1])
        settings = {"pooling": "token" if visual.pool_type == "tok" else "patch mean",
                    "layers": "last n blocks", "patch_features": "ln_post + proj, as the pooled feature",
                    "prefix_tokens": 1, "pos_interp": "open_clip (bicubic, antialias)"}
        size = visual.image_size[0] if isinstance(visual.image_size, (tuple, list)) else visual.image_size
        super().__init__(visual, arch=f"open_clip:{name}", patch_size=int(patch), embed_dim=width,
                         num_blocks=len(visual.transformer.resblocks), input_norm=input_norm,
                         input_size=int(size), settings=settings, norm_source=norm_source)

    def _positions(self, h: int, w: int) -> torch.Tensor:
        pos = self.model.positional_embedding
        g0, g1 = self.model.grid_size
        if (h, w) == (g0, g1):
            return pos
        grid = pos[1:].reshape(1, g0, g1, -1).permute(0, 3, 1, 2)
        grid = F.interpolate(grid, size=(h, w), mode="bicubic", antialias=True, align_corners=False)
        return torch.cat([pos[:1], grid.permute(0, 2, 3, 1).reshape(h * w, -1)], dim=0)

    def _embeds(self, x: torch.Tensor) -> torch.Tensor:
        """VisionTransformer._embeds with the position table fitted to the grid."""
        v = self.model
        x = v.conv1(x)
        b, d, h, w = x.shape
        x = x.reshape(b, d, h * w).permute(0, 2, 1)
        x = torch.cat([v.class_embedding.to(x.dtype).expand(b, 1, -1), x], dim=1)
        x = x + self._positions(h, w).to(x.dtype)
        return v.ln_pre(v.patch_dropout(x))

    def _features(self, x: torch.Tensor, n_last_blocks: int, final_norm: bool) -> BackboneFeatures:
        v = self.model
        h, w = x.shape[-2] // self.patch_size, x.shape[-1] // self.patch_size
        _, inter = v.transformer.forward_intermediates(self._embeds(x), indices=n_last_blocks)
        cls, patches = [], []
        for tokens in inter:
            tokens = v.ln_post(tokens) if final_norm else tokens
            pooled, grid = v._global_pool(tokens)
            if v.proj is not None:
                pooled, grid = pooled @ v.proj, grid @ v.proj
            cls.append(pooled)
            patches.append(grid.reshape(grid.shape[0], h, w, grid.shape[-1]))
        return BackboneFeatures(cls=torch.stack(cls, dim=1), patches=torch.stack(patches, dim=1))
