"""A Hugging Face transformers vision model as a feature backbone, from its hidden states.

Every encoder layer's output is a hidden state (B, prefix + h*w, d); the adapter keeps the
last n, applies the model's final norm when ``final_norm`` is asked (Dinov2Model's and ViTModel's
``layernorm``, CLIP's and SigLIP's ``post_layernorm``), splits the prefix tokens (class
token, DINOv2's registers) from the patch grid, and reshapes the grid. The global feature is
the class token where the model has one, else the model's own pooled output (SigLIP's
attention-pooling head). Position embeddings are resized by the library
(``interpolate_pos_encoding``).
"""
from __future__ import annotations

import inspect

import torch
from torch import nn

from harness.errors import ConfigError
from harness.models.backbone import BackboneFeatures
from harness.models.feature_backbone import AdaptedBackbone, InputNorm

# model_type -> (attribute of the final norm, has a class token); the vision towers keep it at
# the top (transformers 5) or under `vision_model` (4.x)
SUPPORTED = {
    "dinov2": ("layernorm", True),
    "dinov2_with_registers": ("layernorm", True),
    "vit": ("layernorm", True),
    "clip_vision_model": ("post_layernorm", True),
    "siglip_vision_model": ("post_layernorm", False),
}


def _final_norm(model: nn.Module, attr: str) -> tuple[nn.Module, str]:
    for owner, prefix in ((model, ""), (getattr(model, "vision_model", None), "vision_model.")):
        if owner is not None and isinstance(getattr(owner, attr, None), nn.Module):
            return getattr(owner, attr), prefix + attr
    raise ConfigError(f"{type(model).__name__} has no final norm {attr!r}")


class HFBackbone(AdaptedBackbone):
    adapter_name = "transformers"

    def __init__(self, model: nn.Module, name: str, input_norm: InputNorm | None = None,
                 norm_source: str = "default imagenet"):
        cfg = model.config
        kind = getattr(cfg, "model_type", None)
        if kind not in SUPPORTED:
            raise ConfigError(f"transformers model {name!r} is a {kind!r} ({type(model).__name__}); supported: "
                              f"{', '.join(sorted(SUPPORTED))} (load CLIP/SigLIP folders as their vision model)")
        norm_attr, token = SUPPORTED[kind]
        final_norm, norm_path = _final_norm(model, norm_attr)
        regs = int(getattr(cfg, "num_register_tokens", 0) or 0)
        patch = cfg.patch_size if isinstance(cfg.patch_size, int) else cfg.patch_size[0]
        size = cfg.image_size if isinstance(cfg.image_size, int) else cfg.image_size[0]
        settings = {"pooling": "token" if token else "head", "layers": "last n hidden states" if token else "last",
                    "final_norm": norm_path, "prefix_tokens": (1 if token else 0) + regs,
                    "pos_interp": "transformers"}
        super().__init__(model, arch=f"transformers:{type(model).__name__}", patch_size=int(patch),
                         embed_dim=int(cfg.hidden_size), num_blocks=int(cfg.num_hidden_layers) if token else 1,
                         input_norm=input_norm if input_norm is not None else InputNorm(),
                         input_size=int(size), settings=settings, norm_source=norm_source)
        self.token = token
        self.num_reg_tokens = regs
        self.final_norm = final_norm
        self.interpolate_kw = ({"interpolate_pos_encoding": True}
                               if "interpolate_pos_encoding" in inspect.signature(model.forward).parameters else {})

    def _features(self, x: torch.Tensor, n_last_blocks: int, final_norm: bool) -> BackboneFeatures:
        out = self.model(pixel_values=x, output_hidden_states=True, **self.interpolate_kw)
        # hidden_states[0] is the embedding output; [i] the output of layer i
        states = list(out.hidden_states[-n_last_blocks:])
        if final_norm:
            states = [self.final_norm(s) for s in states]
        prefix = int(self.settings["prefix_tokens"])
        h, w = x.shape[-2] // self.patch_size, x.shape[-1] // self.patch_size
        tokens = torch.stack(states, dim=1)  # (B, n, T, d)
        b, n, t, d = tokens.shape
        if t != prefix + h * w:
            raise ConfigError(f"{self.arch} gave {t} tokens for a {h}x{w} grid with {prefix} prefix token(s)")
        patches = tokens[:, :, prefix:].reshape(b, n, h, w, d)
        if self.token:
            cls = tokens[:, :, 0]
        elif getattr(out, "pooler_output", None) is not None:
            cls = out.pooler_output[:, None]
        else:  # a SigLIP built without its pooling head: the mean of the (normed) patch tokens
            cls = patches.mean(dim=(2, 3))
        registers = tokens[:, :, 1:prefix] if self.num_reg_tokens else None
        return BackboneFeatures(cls=cls, patches=patches, registers=registers)
