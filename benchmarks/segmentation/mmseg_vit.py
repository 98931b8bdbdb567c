"""``SslBenchViT``: mmseg's ``VisionTransformer`` that loads the converted harness weights
(vit_weights.py) strictly, through the core's one ``load_strict``, and can be frozen. mmseg is
imported inside :func:`register_mmseg_modules`."""
from __future__ import annotations

import math

import torch

from harness.models.sources.common import load_strict

_REGISTERED = False


def register_mmseg_modules() -> None:
    """Register ``SslBenchViT`` in mmseg's MODELS registry (idempotent)."""
    global _REGISTERED
    if _REGISTERED:
        return
    from mmseg.models.backbones import VisionTransformer
    from mmseg.registry import MODELS

    class SslBenchViT(VisionTransformer):
        """mmseg's ViT that loads harness weights strictly and can be frozen.

        ``weights``: safetensors file from :func:`save_converted`, loaded in
        ``init_weights`` (which mmengine's Runner calls before resuming, so a resumed run
        overwrites them with its own checkpoint). ``frozen``: no gradients (the forward runs
        under ``no_grad``), and ``frozen_mode`` says what ``train()`` does to it:

        - "train": the module follows ``train()`` as any other, CrIBo's behaviour: its
          FreezableVisionTransformer puts the frozen stages in eval mode once, at
          construction (segmentation/models/freezable_vision_transformer.py:291-326), and
          mmengine's loop calls ``model.train()`` before every iteration, which turns its
          DropPath back on -- the head trains on stochastic-depth features;
        - "eval": the module stays in eval mode whatever ``train()`` is called with:
          deterministic features.
        """

        def __init__(self, weights: str | None = None, frozen: bool = False, frozen_mode: str = "eval",
                     **kwargs):
            if frozen_mode not in ("train", "eval"):
                raise ValueError(f"frozen_mode must be 'train' or 'eval', found {frozen_mode!r}")
            super().__init__(**kwargs)
            self.weights = weights
            self.frozen = frozen
            self.frozen_mode = frozen_mode
            if frozen:
                for p in self.parameters():
                    p.requires_grad_(False)
                self.eval()

        def init_weights(self):
            if self.weights is None:  # mmseg's own random init
                return super().init_weights()
            _load_weights(self)

        def train(self, mode: bool = True):
            super().train(mode and not (self.frozen and self.frozen_mode == "eval"))
            return self

        def forward(self, inputs):
            if self.frozen:
                with torch.no_grad():
                    return super().forward(inputs)
            return super().forward(inputs)

    SslBenchViT.__module__ = __name__
    MODELS.register_module(name="SslBenchViT", module=SslBenchViT, force=True)
    globals()["SslBenchViT"] = SslBenchViT
    _REGISTERED = True


def _load_weights(vit) -> None:
    """``SslBenchViT.init_weights`` with weights: its safetensors file, loaded strictly, the
    position table resized to the configured grid."""
    from safetensors.torch import load_file

    state = load_file(vit.weights)
    native = state.pop("pos_embed_native", None)
    pos = state.get("pos_embed")
    if pos is not None and pos.shape != vit.pos_embed.shape:
        # resize once, from the trained grid, not from a table already resized at import
        pos = pos if native is None else native
        side = math.isqrt(pos.shape[1] - 1)
        grid = (vit.img_size[0] // vit.patch_size, vit.img_size[1] // vit.patch_size)
        # mmseg's resize (bicubic, align_corners=False, to the exact grid), the one
        # its init_weights applies to CrIBo's converted checkpoints.
        state["pos_embed"] = vit.resize_pos_embed(pos, grid, (side, side), vit.interpolate_mode)
    with torch.no_grad():
        load_strict(vit, state, vit.weights)
    vit._is_init = True
