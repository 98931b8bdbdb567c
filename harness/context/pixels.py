"""The raw-pixel baseline: features that are the input pixels themselves.

Each patch's feature is its pixels as the protocol's transform gives them (resized and
normalised with the protocol's mean and std), flattened channel-last: a p x p patch gives a
3 * p * p vector, on the same patch grid as a ViT of patch size p, so every protocol that
reads features through harness.features.extract (k-NN, linear probe, dense NN) measures it unchanged.
The "CLS" feature is the whole image area-averaged down to one p x p patch (a thumbnail of
the same size as a patch vector): a global descriptor that keeps the layout, where the
average of the patch vectors (the ``avgpool`` feature) keeps only the mean patch.

There is no network: protocols that finetune or rebuild the backbone (the mmseg ones) refuse
it with harness.errors.NotApplicable. ``n_last_blocks`` > 1 is refused (one "block"); the
``norm`` switch has nothing to act on.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from harness.models.archs import BackboneFeatures
from harness.errors import ConfigError
from harness.registry import register_model_source

PIXELS_VERSION = 1  # part of the identity: a change to the features must not reuse cached ones


class PixelBackbone(nn.Module):
    arch = "pixels"
    num_reg_tokens = 0
    pos_interp_id = "official"  # no position embeddings; the default keeps cache keys plain

    def __init__(self, patch_size: int = 8):
        super().__init__()
        if patch_size < 1:
            raise ConfigError(f"pixels: patch_size must be >= 1, found {patch_size}")
        self.patch_size = int(patch_size)
        self.embed_dim = 3 * self.patch_size ** 2
        self.arch_kwargs = {"patch_size": self.patch_size}
        # protocols size their choices by depth (e.g. the linear probe's last-n blocks)
        self.blocks = nn.ModuleList([nn.Identity()])
        self.num_blocks = 1

    def get_features(self, x: torch.Tensor, n_last_blocks: int = 1, final_norm: bool = True) -> BackboneFeatures:
        if n_last_blocks != 1:
            raise ConfigError(f"the raw-pixel baseline has one feature level; n_last_blocks must be 1, "
                              f"found {n_last_blocks}")
        b, c, hh, ww = x.shape
        p = self.patch_size
        if c != 3 or hh % p or ww % p:
            raise ValueError(f"expected images (B, 3, H, W) with H, W multiples of {p}, found {tuple(x.shape)}")
        h, w = hh // p, ww // p
        patches = x.reshape(b, 3, h, p, w, p).permute(0, 2, 4, 3, 5, 1).reshape(b, h, w, self.embed_dim)
        thumb = F.adaptive_avg_pool2d(x, (p, p)).permute(0, 2, 3, 1).reshape(b, self.embed_dim)
        return BackboneFeatures(cls=thumb[:, None], patches=patches[:, None])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.get_features(x).patches[:, 0].flatten(1, 2)


@register_model_source("pixels")
def pixels_source(spec, ctx):
    """``pixels:`` (``patch_size=N``, default 8): the raw-pixel baseline."""
    unknown = set(spec.options) - {"patch_size"}
    if unknown:
        raise ConfigError(f"model {spec.name!r}: pixels takes only patch_size, found {sorted(spec.options)}")
    patch = spec.options.get("patch_size", spec.target or 8)
    if isinstance(patch, bool) or not isinstance(patch, int) and not str(patch).isdigit():
        raise ConfigError(f"model {spec.name or 'pixels'!r}: patch_size must be a whole number of pixels, "
                          f"found {patch!r}")
    return pixel_model(int(patch), name=spec.name or "pixels")


def pixel_model(patch_size: int = 8, name: str = "pixels"):
    from harness.models.handle import ModelHandle

    meta = {"method": "pixels", "context": "pixels", "epochs": 0, "steps": 0,
            "identity": f"pixels-p{patch_size}-v{PIXELS_VERSION}"}
    return ModelHandle(name, PixelBackbone(patch_size).eval(), meta)
