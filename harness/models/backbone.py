"""ViT backbones (timm) with the one feature API every protocol uses.

`ViTBackbone` is a timm ``VisionTransformer`` so parameter names are timm's, which
are also the names the official DINO / iBOT / CrIBo / SynCLR / MAE / DINOv2 checkpoints
use (DINOv2's register tokens and SwiGLU weights are renamed once, by the importer).
Additions: position embeddings are interpolated the way the official code of each family
does (timm's own resampling is antialiased and gives different features at any size other
than the training size), register tokens that run through every block and are kept out
of the patch features, and an optional learned mask token for masked-image-modelling
students.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from timm.models.vision_transformer import VisionTransformer
from torch import nn

from harness.errors import ConfigError
# the architectures live in a module without timm; importers of this one keep finding them here
from harness.models.archs import (ARCH_KEYS, ARCHS, DEFAULT_POS_INTERP, FFN_LAYERS,  # noqa: F401
                                  BackboneFeatures, PosInterp, arch_kwargs_for, swiglu_hidden)


def _swiglu_fused(hidden: int):
    """timm's packed GLU MLP (fc1 -> [x1, x2], silu(x1) * x2, fc2), the layout of DINOv2's
    SwiGLUFFN (w12 -> chunk, silu(x1) * x2, w3) once w12/w3 are renamed fc1/fc2."""
    from timm.layers import GluMlp

    def make(in_features, hidden_features=None, act_layer=None, drop=0.0, bias=True, **kw):
        return GluMlp(in_features, 2 * hidden, act_layer=nn.SiLU, drop=drop, bias=bias, gate_last=False,
                      **{k: v for k, v in kw.items() if k in ("device", "dtype", "norm_layer")})
    return make


class ViTBackbone(VisionTransformer):
    def __init__(self, arch: str = "custom", *, pos_interp: PosInterp = "official",
                 use_mask_token: bool = False, **kwargs):
        kwargs.setdefault("num_classes", 0)
        kwargs.setdefault("dynamic_img_size", True)
        arch_kwargs = {k: kwargs[k] for k in ARCH_KEYS if k in kwargs}
        self_only = {k: kwargs.pop(k) for k in ("ffn_layer", "pos_interp_offset", "pos_interp_antialias",
                                                "native_img_size") if k in kwargs}
        ffn = self_only.get("ffn_layer", "mlp")
        if ffn not in FFN_LAYERS:
            raise ConfigError(f"ffn_layer must be one of {FFN_LAYERS}, found {ffn!r}")
        if ffn == "swiglufused":
            kwargs["mlp_layer"] = _swiglu_fused(swiglu_hidden(kwargs["embed_dim"], kwargs.get("mlp_ratio", 4.0)))
        super().__init__(**kwargs)
        self.arch = arch
        self.arch_kwargs = arch_kwargs
        self.pos_interp = pos_interp
        self.pos_interp_offset = float(self_only.get("pos_interp_offset", DEFAULT_POS_INTERP["pos_interp_offset"]))
        self.pos_interp_antialias = bool(self_only.get("pos_interp_antialias", False))
        if self.pos_interp_offset < 0:
            raise ConfigError(f"pos_interp_offset must be >= 0, found {self.pos_interp_offset}")
        self.patch_size = self.patch_embed.patch_size[0]
        native = self_only.get("native_img_size")
        if native is not None and int(native) != self.patch_embed.img_size[0]:
            if int(native) % self.patch_size:
                raise ConfigError(f"native_img_size {native} is not a multiple of the patch size {self.patch_size}")
            g = int(native) // self.patch_size
            n_prefix = 0 if self.no_embed_class else self.num_prefix_tokens
            self.register_buffer("pos_embed_native", torch.zeros(1, n_prefix + g * g, self.embed_dim))
        else:
            self.pos_embed_native = None
        # Set by load_backbone for checkpoints whose pos_embed was resized at import without the
        # trained table kept: resizing it again would not give the official model's features.
        self.pos_resize_refused: str | None = None
        # The mask token belongs to the student only (iBOT's `masked_embed`); teachers
        # and exported backbones do not have it.
        self.mask_token = nn.Parameter(torch.zeros(1, self.embed_dim)) if use_mask_token else None

    @property
    def num_blocks(self) -> int:
        """How many blocks ``n_last_blocks`` may take (the feature contract)."""
        return len(self.blocks)

    @property
    def pos_interp_id(self) -> str:
        """How position embeddings are resized, as one string: ``official`` (DINO's, the
        default) or ``timm``; other offsets / antialias are spelled out (they change the
        features at any grid but the training one, so caches and records keep them apart)."""
        if self.pos_interp == "timm" or (self.pos_interp_offset, self.pos_interp_antialias) == (0.1, False):
            return self.pos_interp
        mode = f"offset={self.pos_interp_offset:g}" if self.pos_interp_offset else "size"
        return f"official:{mode}{',antialias' if self.pos_interp_antialias else ''}"

    # ------------------------------------------------------------------ embeddings
    def interpolate_pos_embed(self, h: int, w: int) -> torch.Tensor:
        """Position embeddings for an h x w patch grid, prefix tokens first."""
        n_prefix = 0 if self.no_embed_class else self.num_prefix_tokens
        g0 = self.patch_embed.grid_size
        if (h, w) == tuple(g0):
            return self.pos_embed
        source = self.pos_embed
        if self.pos_embed_native is not None:
            # resize from the trained grid, never from a table already resized at import
            source = self.pos_embed_native
            side = math.isqrt(source.shape[1] - n_prefix)
            g0 = (side, side)
            if (h, w) == g0:
                return source
        elif self.pos_resize_refused:
            raise ConfigError(f"{self.pos_resize_refused}; the input gives a {h}x{w} patch grid, the "
                              f"position embeddings are {g0[0]}x{g0[1]}")
        prefix, grid = source[:, :n_prefix], source[:, n_prefix:]
        if self.pos_interp == "timm":
            from timm.layers import resample_abs_pos_embed

            return resample_abs_pos_embed(source, new_size=(h, w), old_size=g0,
                                          num_prefix_tokens=n_prefix)
        # Official DINO/iBOT/CrIBo/DINOv2 interpolation: scale factors with the +0.1 offset that
        # avoids floating-point truncation, bicubic, no antialias. DINOv2 with registers
        # (offset 0, antialias) and MAE (util/pos_embed.py: offset 0, no antialias) give the
        # target size instead of a scale factor.
        n = grid.shape[1]
        side = int(math.sqrt(n))
        if side * side != n:
            raise ConfigError(f"official position interpolation needs a square grid, found {n} tokens")
        dim = grid.shape[-1]
        grid = grid.reshape(1, side, side, dim).permute(0, 3, 1, 2)
        off = self.pos_interp_offset
        target = (dict(scale_factor=((h + off) / side, (w + off) / side)) if off else dict(size=(h, w)))
        grid = F.interpolate(grid.float(), mode="bicubic", align_corners=False,
                             antialias=self.pos_interp_antialias, **target)
        if grid.shape[-2:] != (h, w):
            raise RuntimeError(f"position interpolation gave {tuple(grid.shape[-2:])}, expected {(h, w)}")
        grid = grid.to(source.dtype).permute(0, 2, 3, 1).reshape(1, h * w, dim)
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

    def get_features(self, x: torch.Tensor, n_last_blocks: int = 1, final_norm: bool = True) -> BackboneFeatures:
        if not 1 <= n_last_blocks <= len(self.blocks):
            raise ValueError(f"n_last_blocks must be in [1, {len(self.blocks)}], found {n_last_blocks}")
        h, w = x.shape[-2] // self.patch_size, x.shape[-1] // self.patch_size
        x = self.prepare_tokens(x)
        outs = []
        first_kept = len(self.blocks) - n_last_blocks
        for i, blk in enumerate(self.blocks):
            x = blk(x)
            if i >= first_kept:
                outs.append(self.norm(x) if final_norm else x)
        # (B, n, T, d); one block (the common case) is a view, not a copy
        tokens = outs[0].unsqueeze(1) if len(outs) == 1 else torch.stack(outs, dim=1)
        cls = tokens[:, :, 0]
        # [CLS, registers..., patches]: the registers took part in every block, but they are
        # no image positions, so the patch features start after them (DINOv2's
        # x_norm_patchtokens = x_norm[:, num_register_tokens + 1:]).
        patches = tokens[:, :, self.num_prefix_tokens:]
        registers = tokens[:, :, 1:self.num_prefix_tokens] if self.num_reg_tokens else None
        b, n, _, d = patches.shape
        return BackboneFeatures(cls=cls, patches=patches.reshape(b, n, h, w, d), registers=registers)

    def backbone_state_dict(self) -> dict[str, torch.Tensor]:
        """The state dict without the student-only mask token."""
        return {k: v for k, v in self.state_dict().items() if k != "mask_token"}


def create_backbone(arch: str, *, drop_path_rate: float = 0.0, pos_interp: PosInterp = "official",
                    use_mask_token: bool = False, **overrides) -> ViTBackbone:
    """Build a backbone from a preset name, optionally overriding architecture keys."""
    unknown = set(overrides) - set(ARCH_KEYS)
    if unknown:
        raise ConfigError(f"unknown backbone setting(s) {sorted(unknown)}; allowed: {list(ARCH_KEYS)}")
    kwargs = arch_kwargs_for(arch, **overrides)
    return ViTBackbone(arch, pos_interp=pos_interp, use_mask_token=use_mask_token,
                       drop_path_rate=drop_path_rate, **kwargs)
