"""Any timm model as a feature backbone, through timm's ``forward_intermediates`` API.

One code path for every family timm implements it for: ViTs give their class token and
patch tokens per block; CNNs and hierarchical models (ResNet, ConvNeXt, Swin, ...) give their
last feature map as the patch grid (stride = its reduction) and the model's own pooled
feature (``forward_head(pre_logits=True)``) as the global feature. ``final_norm=True`` asks timm to
apply the model's final norm to the intermediates, as the harness ViT does.
"""
from __future__ import annotations

import torch
from torch import nn

from harness.errors import ConfigError
from harness.models.backbone import BackboneFeatures
from harness.models.feature_backbone import AdaptedBackbone, InputNorm


def _has_class_token(model: nn.Module) -> bool:
    return getattr(model, "cls_token", None) is not None and int(getattr(model, "num_prefix_tokens", 0)) > 0


class TimmBackbone(AdaptedBackbone):
    adapter_name = "timm"

    def __init__(self, model: nn.Module, name: str, input_norm: InputNorm | None = None,
                 norm_source: str = "default imagenet"):
        """``input_norm``: what the caller knows the model expects (a file's normalisation is
        never guessed from timm's pretrained tag: harness.models.sources decides); ImageNet's
        by default."""
        if not hasattr(model, "forward_intermediates"):
            raise ConfigError(f"timm model {name!r} ({type(model).__name__}) has no forward_intermediates; "
                              f"give a feature function (code source with features=module:function)")
        info = list(getattr(model, "feature_info", None) or [])
        if not info:
            raise ConfigError(f"timm model {name!r} declares no feature_info (no spatial feature map)")
        last = info[-1]
        token = _has_class_token(model)
        size = dict(getattr(model, "pretrained_cfg", None) or {}).get("input_size")
        # blocks whose outputs share the last one's width and stride can be stacked (a ViT's);
        # a hierarchical model's stages differ, so it gives its last stage only
        same = 0
        for f in reversed(info):
            if f["num_chs"] != last["num_chs"] or f["reduction"] != last["reduction"]:
                break
            same += 1
        settings = {"pooling": "token" if token else "head",
                    "layers": "last n blocks" if token else "last stage",
                    "prefix_tokens": int(getattr(model, "num_prefix_tokens", 0) or 0)}
        if hasattr(model, "pos_embed") and getattr(model, "pos_embed", None) is not None:
            settings["pos_interp"] = "timm"  # timm's resample_abs_pos_embed (dynamic_img_size)
        # the architecture without the pretrained tag: a tag names weights and preprocessing, which
        # the weights key and input_norm already hold
        super().__init__(model, arch=f"timm:{name.split('.')[0]}", patch_size=int(last["reduction"]),
                         embed_dim=int(last["num_chs"]), num_blocks=same if token else 1,
                         input_norm=input_norm if input_norm is not None else InputNorm(),
                         input_size=int(size[-1]) if size else None, settings=settings, norm_source=norm_source)
        self.token = token
        self.num_reg_tokens = max(0, settings["prefix_tokens"] - 1) if token else 0

    def native_equivalent(self) -> bool:
        """A plain timm ViT (class-token pooling, no registers, position embeddings over the
        prefix too, no extra norms, ImageNet input) computes exactly what the harness ViT
        with ``pos_interp: timm`` computes on the same weights (tests/test_model_sources.py)."""
        from timm.models.vision_transformer import VisionTransformer

        m = self.model
        return (type(m) is VisionTransformer and self.token and self.num_reg_tokens == 0
                and not m.no_embed_class and m.global_pool == "token"
                and isinstance(m.fc_norm, nn.Identity) and isinstance(m.norm_pre, nn.Identity)
                and self.input_norm.identity)

    def _features(self, x: torch.Tensor, n_last_blocks: int, final_norm: bool) -> BackboneFeatures:
        if self.token:
            # tokens as they are (NLC): the grid is a view of them, no NCHW round trip
            inter = self.model.forward_intermediates(x, indices=n_last_blocks, norm=final_norm, output_fmt="NLC",
                                                     intermediates_only=True, return_prefix_tokens=True)
            h, w = x.shape[-2] // self.patch_size, x.shape[-1] // self.patch_size
            maps = [t.reshape(t.shape[0], h, w, t.shape[-1]) for t, _ in inter]
            cls = torch.stack([p[:, 0] for _, p in inter], dim=1)
            registers = (torch.stack([p[:, 1:] for _, p in inter], dim=1) if self.num_reg_tokens else None)
        else:
            final, inter = self.model.forward_intermediates(x, indices=1, norm=final_norm, output_fmt="NCHW")
            maps = [m.permute(0, 2, 3, 1) for m in inter]
            cls = self.model.forward_head(final, pre_logits=True)[:, None]
            registers = None
        # (B, n, h, w, d); one block (the common case) is a view, not a copy
        patches = maps[0].unsqueeze(1) if len(maps) == 1 else torch.stack(maps, dim=1)
        return BackboneFeatures(cls=cls, patches=patches, registers=registers)
