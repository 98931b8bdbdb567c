"""Any model with the feature contract as an mmseg backbone: the path of the segmentation
protocols for every model whose weights mmseg's ``VisionTransformer`` cannot load (ResNet,
ConvNeXt, Swin, transformers and torch.hub towers, user code, ViTs with register tokens or
layer scale).

``SslBenchFeatureBackbone`` wraps the already-built backbone (harness.models.feature_backbone:
an adapter, or the harness ViT) and returns its patch grid of the last block, final-normed
(``get_features(x, 1, final_norm=True).patches``), as one NCHW feature map: what mmseg's ViT returns
on the other path. mmengine builds models from config dicts, so the module object is handed
over in-process (:func:`handed_over`, keyed by the model's cache key) and each build takes a
deep copy: every learning rate starts from the same weights, and the caller's model stays
where it was.

- frozen (``seg_linear``): no gradients, and eval mode whatever ``train()`` asks -- a frozen
  BatchNorm must not move its statistics, and the model's own drop path stays off;
- trainable (``segmenter``): the model follows ``train()`` with its own drop path (the model
  as its source built it), and every weight trains.

Inputs are the data preprocessor's (normalised by the protocol's ``mean`` / ``std``); they
reach ``get_features`` as the other protocols' ImageNet-normalised input does, so a model
declaring its own normalisation gets the same mapping as everywhere (the adapter's
``InputNorm``). An input that is not a multiple of the stride (a sliding-window crop of an
image smaller than the crop) is padded at the bottom and right with zeros, as mmseg's
``AdaptivePadding`` pads for its ViT.

Segmenter's mask transformer needs a head count dividing the feature width: :func:`mask_heads`.
Only ``torch`` is imported at module level; the mmseg class is built by
:func:`register_feature_backbone`.
"""
from __future__ import annotations

import copy
from pathlib import Path
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import nn

from benchmarks.segmentation.mmseg_config import head_config
from benchmarks.segmentation.sweep import prepare_data, run_sweep
from harness.errors import ConfigError, NotApplicable
from harness.models.handover import Handover

if TYPE_CHECKING:
    from benchmarks.segmentation.config import SegConfig

FEATURE_BACKBONE = "SslBenchFeatureBackbone"
# The rule of the mask transformer's head count (recorded in the fingerprint's head spec).
MASK_HEADS_RULE = "the model's own if it divides the width, else width // 64 lowered to a divisor"
HEAD_WIDTH = 64  # the head width of ViT-S, -B and -L

# backbones handed over to the mmseg module, by cache key (harness.models.feature_backbone)
HANDOVER = Handover(FEATURE_BACKBONE, "benchmarks.segmentation.mmseg_adapted.HANDOVER")
handed_over, handed = HANDOVER.handed_over, HANDOVER.take


# ============================================================================ the head count
def declared_heads(backbone: nn.Module) -> int | None:
    """The attention head count a model declares: a transformers config's
    ``num_attention_heads``, else the ``num_heads`` of its last module that has one (a ViT
    block's attention, a Swin's last-stage window attention); None for a model without
    attention (ResNet, ConvNeXt, a user CNN)."""
    module = getattr(backbone, "model", backbone)  # an adapter's wrapped module
    config = getattr(module, "config", None)
    n = getattr(config, "num_attention_heads", None)
    if isinstance(n, int) and n > 0:
        return n
    found = None
    for m in module.modules():
        value = getattr(m, "num_heads", None)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            found = value
    return found


def mask_heads(backbone: nn.Module, width: int) -> tuple[int, str]:
    """(head count, where it came from) of Segmenter's mask transformer on ``width`` features:
    the model's own (``declared_heads``) when it divides the width, else the most heads at
    least 64 wide that divide it (width / 64 for a multiple of 64; 1 below 128)."""
    own = declared_heads(backbone)
    if own and width % own == 0:
        return own, "model"
    return next(h for h in range(max(1, width // HEAD_WIDTH), 0, -1) if width % h == 0), f"width/{HEAD_WIDTH}"


def head_spec(backbone: nn.Module, head: str, frozen: bool) -> dict:
    """What the fingerprint records of this path beyond the protocol's own head spec."""
    spec = {"backbone": "feature_contract", "features": "patch grid, last block, final norm",
            "backbone_mode": "eval (frozen)" if frozen else "train (the model's own drop path)"}
    if head == "mask":
        heads, source = mask_heads(backbone, int(backbone.embed_dim))
        spec.update(mask_heads=heads, mask_heads_from=source, mask_heads_rule=MASK_HEADS_RULE)
    return spec


# ============================================================================ what cannot run
def check_applicable(backbone: nn.Module, cfg: SegConfig, protocol: str) -> tuple[int, int]:
    """Refuse, naming the reason, what this path cannot run; else the (h, w) grid of a crop.

    No patch grid (no ``get_features`` / stride): NotApplicable. A crop that is not a multiple
    of the stride: ConfigError naming the nearest crops that are. One probe forward at the crop
    checks the grid the model gives there (a model that refuses the size says so here, not in
    the middle of training)."""
    stride = getattr(backbone, "patch_size", None)
    if not callable(getattr(backbone, "get_features", None)) or not isinstance(stride, int) or stride < 1:
        raise NotApplicable(f"{protocol} trains a head on a model's spatial feature grid; "
                            f"{type(backbone).__name__} gives none (no get_features with a stride)")
    crop = cfg.crop_size
    if stride > crop:
        raise NotApplicable(f"{protocol}: the model's stride {stride} is larger than the crop {crop}: "
                            f"its feature grid has no cell")
    if crop % stride:
        lower, upper = crop // stride * stride, (crop // stride + 1) * stride
        raise ConfigError(f"{protocol}: crop_size {crop} is not a multiple of the model's stride {stride}; "
                          f"set crop_size to {lower} or {upper} (--set crop_size={upper})")
    device = next((p.device for p in backbone.parameters()), torch.device("cpu"))
    was_training = backbone.training
    backbone.eval()
    try:
        with torch.no_grad():
            patches = backbone.get_features(torch.zeros(1, 3, crop, crop, device=device), 1, True).patches
    finally:
        backbone.train(was_training)
    grid = tuple(patches.shape[2:4])
    if patches.ndim != 5 or grid != (crop // stride, crop // stride):
        raise NotApplicable(f"{protocol}: the model gave patch features of shape {tuple(patches.shape)} for "
                            f"a {crop}-pixel crop; expected (1, 1, {crop // stride}, {crop // stride}, d) "
                            f"at stride {stride}")
    return grid


# ============================================================================ the mmseg module (lazy)
_REGISTERED = False


def register_feature_backbone() -> None:
    """Register ``SslBenchFeatureBackbone`` in mmseg's MODELS registry (idempotent)."""
    global _REGISTERED
    if _REGISTERED:
        return
    from mmengine.model import BaseModule
    from mmseg.registry import MODELS

    class SslBenchFeatureBackbone(BaseModule):
        """A feature-contract backbone as mmseg's backbone: ``forward(inputs)`` -> a tuple of
        one (B, d, h, w) map, the final-normed patch grid of the last block."""

        def __init__(self, backbone_key: str, frozen: bool = False):
            super().__init__()
            self.backbone = copy.deepcopy(handed(backbone_key))
            self.stride = int(self.backbone.patch_size)
            self.frozen = frozen
            if frozen:
                for p in self.backbone.parameters():
                    p.requires_grad_(False)
            else:
                for p in self.backbone.parameters():
                    p.requires_grad_(True)
            self.train(False)
            self._is_init = True  # the weights are the handed-over model's

        def init_weights(self):
            """Nothing: mmengine's init would reach the wrapped model's own init (a timm ViT's
            ``init_weights`` re-draws every weight)."""

        def train(self, mode: bool = True):
            super().train(mode and not self.frozen)
            return self

        def forward(self, inputs: torch.Tensor) -> tuple[torch.Tensor]:
            h, w = inputs.shape[-2:]
            pad_h, pad_w = -h % self.stride, -w % self.stride
            if pad_h or pad_w:
                inputs = F.pad(inputs, (0, pad_w, 0, pad_h))
            with torch.set_grad_enabled(torch.is_grad_enabled() and not self.frozen):
                patches = self.backbone.get_features(inputs, 1, True).patches  # (B, 1, h, w, d)
            return (patches[:, -1].permute(0, 3, 1, 2).contiguous(),)

    SslBenchFeatureBackbone.__module__ = __name__
    MODELS.register_module(name=FEATURE_BACKBONE, module=SslBenchFeatureBackbone, force=True)
    globals()[FEATURE_BACKBONE] = SslBenchFeatureBackbone
    _REGISTERED = True


def feature_backbone_config(key: str, frozen: bool) -> dict:
    return dict(type=FEATURE_BACKBONE, backbone_key=key, frozen=frozen)


# ============================================================================ the protocol's run
def run_feature_seg_protocol(backbone: nn.Module, key: str, cfg: SegConfig, data_root: str | Path,
                             work_dir: str | Path, *, head: str, frozen: bool, protocol: str) -> list[dict]:
    """The protocol on a feature-contract backbone: every lr of ``cfg.lrs``, one dict per lr
    (the sweep of sweep.run_sweep, shared with the ViT path)."""
    check_applicable(backbone, cfg, protocol)
    data = prepare_data(cfg, data_root)
    register_feature_backbone()
    width = int(backbone.embed_dim)
    heads = mask_heads(backbone, width)[0]
    decode_head = head_config(head, width, heads, data.num_classes)
    with handed_over(key, backbone):
        return run_sweep(cfg, data, work_dir, backbone=feature_backbone_config(key, frozen),
                            decode_head=decode_head, head=head)
