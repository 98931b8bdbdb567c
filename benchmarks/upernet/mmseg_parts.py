"""What ``upernet`` registers into mmseg 1.2.2: the multi-level backbone around any front-door
model and the layer-decay optimizer-wrapper constructor, beside the core's IoU metric that also keeps
each validation image's areas (harness.openmmlab.metric). Only torch is imported at module level;
:func:`register` imports mmseg.

- ``SslBenchMultiLevel``: a deep copy of the handed-over model (:func:`handed_over`; mmengine
  builds from config dicts), its drop path set as the official configs' ``drop_path_rate``
  (linearly 0 .. rate over the blocks, as iBOT's and timm's ViT), trained end to end, through
  harness.models.multilevel. An input that is not a multiple of the stride is cut to the largest
  multiple, which is what the official ViT's strided patch convolution reads of it.
- ``SslBenchLayerDecayConstructor``: each parameter's lr scale and weight decay as iBOT's
  segmentation ``LayerDecayOptimizerConstructor`` (``num_layers + 2`` layers, ``backbone.``
  names, its no-decay rule) through harness.training.layer_decay; mmseg's own constructor
  refuses backbones that are not BEiT / MAE / ConvNeXt.
"""
from __future__ import annotations

import copy

import torch
from torch import nn

from harness.models.handover import Handover
from harness.models.multilevel import MultiLevelBackbone
from harness.openmmlab.metric import register_metric
from harness.training.drop_path import set_drop_path

BACKBONE = "SslBenchMultiLevel"
CONSTRUCTOR = "SslBenchLayerDecayConstructor"
# where the front-door model sits inside the mmseg model (backbone -> MultiLevelBackbone.model)
MODEL_PREFIX = "backbone.model."

HANDOVER = Handover(BACKBONE, "benchmarks.upernet.mmseg_parts.HANDOVER")
handed_over = HANDOVER.handed_over


def resize_pos_embed(model: nn.Module, crop_size: int) -> bool:
    """Resize a harness ViT's position table to the crop's grid once, as iBOT's
    ``mmcv_custom/checkpoint.py`` does at load (bicubic to the target size, prefix tokens kept), so
    that the table trained is the crop's; False (nothing done) for any other model or grid."""
    import torch.nn.functional as F

    from harness.models.backbone import ViTBackbone

    if not isinstance(model, ViTBackbone) or model.pos_embed is None or model.pos_embed_native is not None:
        return False
    g = crop_size // model.patch_size
    g0 = tuple(model.patch_embed.grid_size)
    if g0 == (g, g) or model.no_embed_class:
        return False
    n_prefix = model.num_prefix_tokens
    prefix, grid = model.pos_embed.data[:, :n_prefix], model.pos_embed.data[:, n_prefix:]
    grid = grid.reshape(1, g0[0], g0[1], -1).permute(0, 3, 1, 2)
    grid = F.interpolate(grid.float(), size=(g, g), mode="bicubic", align_corners=False)
    grid = grid.permute(0, 2, 3, 1).reshape(1, g * g, -1).to(prefix.dtype)
    model.pos_embed = nn.Parameter(torch.cat([prefix, grid], dim=1))
    model.patch_embed.img_size = (g * model.patch_size, g * model.patch_size)
    model.patch_embed.grid_size = (g, g)
    model.patch_embed.num_patches = g * g
    return True


def prepared_model(key: str, drop_path_rate: float | None, pos_embed_size: int | None = None) -> nn.Module:
    """A trainable deep copy of the handed-over model with the configs' drop path and, given a
    crop size, its position table resized to that grid."""
    model = copy.deepcopy(HANDOVER.take(key))
    if drop_path_rate is not None:  # null: the model's own
        set_drop_path(model, float(drop_path_rate), "drop_path_rate", "upernet")
    if pos_embed_size:
        resize_pos_embed(model, int(pos_embed_size))
    for p in model.parameters():
        p.requires_grad_(True)
    return model


def optimizer_groups(module: nn.Module, *, base_lr: float, weight_decay: float, layer_decay: float,
                     depth: int | None, decay_skip: str) -> list[dict]:
    """The parameter groups of the whole mmseg model (names ``backbone.model.<model's own>``,
    ``backbone.fpnN``, ``decode_head.*``, ``auxiliary_head.*``)."""
    from harness.training.layer_decay import MMCV_SKIP_LIST, layer_scheme, num_layers, parameter_groups

    scheme = layer_scheme(module, MODEL_PREFIX) if layer_decay < 1 else None
    if scheme is not None and depth is None:
        depth = num_layers(module, scheme)
    skip = MMCV_SKIP_LIST if decay_skip == "mmcv" else None
    return parameter_groups(module, weight_decay, layer_decay, depth=depth, scheme=scheme, skip_list=skip,
                            base_lr=base_lr, with_group_names=True)


def register() -> None:
    """Register the backbone, the constructor, the metric and the validation hook (idempotent)."""
    from mmengine.optim import DefaultOptimWrapperConstructor
    from mmseg.registry import MODELS, OPTIM_WRAPPER_CONSTRUCTORS

    class SslBenchMultiLevel(MultiLevelBackbone):
        def __init__(self, backbone_key: str, out_indices, out_with_norm=False, rescales=None,
                     norm="syncbn", drop_path_rate=None, pos_embed_size=None):
            super().__init__(prepared_model(backbone_key, drop_path_rate, pos_embed_size), out_indices,
                             out_with_norm=out_with_norm, rescales=rescales, norm=norm)

        def forward(self, x):
            p = self.patch_size
            h, w = x.shape[-2] // p * p, x.shape[-1] // p * p
            return super().forward(x[..., :h, :w])

    class SslBenchLayerDecayConstructor(DefaultOptimWrapperConstructor):
        def add_params(self, params, module, **kwargs):
            cfg = self.paramwise_cfg
            params.extend(optimizer_groups(
                module, base_lr=self.base_lr, weight_decay=self.base_wd, layer_decay=cfg["layer_decay_rate"],
                depth=cfg.get("num_layers"), decay_skip=cfg.get("decay_skip", "mmcv")))

    MODELS.register_module(name=BACKBONE, module=SslBenchMultiLevel, force=True)
    OPTIM_WRAPPER_CONSTRUCTORS.register_module(name=CONSTRUCTOR, module=SslBenchLayerDecayConstructor, force=True)
    register_metric()
