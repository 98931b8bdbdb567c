"""What the detection protocol registers into mmdet: the multi-level backbone built from the
model in hand, and iBOT's layer-decay optimizer constructor.

- ``SslBenchMultiLevelBackbone``: harness.models.multilevel's adapter (the kept blocks through
  iBOT's rescales) as an mmdet backbone. mmengine builds models from config dicts, so the model
  object is handed over in-process (:func:`handed_over`, keyed by the model's cache key); each
  build takes a deep copy, so the caller's model is never trained. Its parameters are named
  ``backbone.model.<the model's names>`` and ``backbone.fpn1..4`` (iBOT: ``backbone.<names>``,
  ``backbone.fpn1..4``). ``init_weights`` does nothing: the model's weights are the pretrained
  ones and the rescales keep PyTorch's default init, as iBOT's ``init_weights`` leaves them
  (its truncated-normal init touches Linear and LayerNorm only, and the checkpoint then
  overwrites the ViT's).
- drop path: the model's blocks get stochastic depth rising linearly from 0 to the rate over
  the blocks (iBOT's ``torch.linspace(0, drop_path_rate, depth)``), on the copy only.
- ``SslBenchLayerDecayConstructor``: mmengine's optimizer constructor with the parameter groups of
  iBOT's ``mmcv_custom/layer_decay_optimizer_constructor.py`` (harness.training.layer_decay with
  the detector's names: the model's blocks are layers 1..depth, its embeddings layer 0,
  everything else -- the rescales, the neck, the heads -- the last layer; the skip list that never
  matches, so position embedding and CLS token are weight decayed as there).

Only torch is imported at module level; :func:`register_modules` builds the mm* classes.
"""
from __future__ import annotations

import copy

from torch import nn

from harness.models.handover import Handover
from harness.models.multilevel import MultiLevelBackbone
from harness.training.drop_path import set_drop_path
from harness.training import layer_decay as ld

BACKBONE = "SslBenchMultiLevelBackbone"
CONSTRUCTOR = "SslBenchLayerDecayConstructor"
KEEP_METRICS = "SslBenchKeepMetrics"
MODEL_PREFIX = "backbone.model."  # where the handed-over model's parameters sit in the detector

HANDOVER = Handover(BACKBONE, "benchmarks.detection.mmdet_modules.HANDOVER")
handed_over = HANDOVER.handed_over


def block_list(model: nn.Module) -> nn.Module:
    """The model's numbered blocks (the list layer decay counts)."""
    scheme = ld.layer_scheme(model)
    return model.get_submodule(scheme.prefix + scheme.blocks)


def detector_groups(detector: nn.Module, base_lr: float, weight_decay: float, layer_decay: float,
                    depth: int | None) -> list[dict]:
    """The optimizer's parameter groups of the whole detector, as iBOT's constructor builds them."""
    scheme = ld.layer_scheme(detector, prefix=MODEL_PREFIX)
    depth = ld.num_layers(detector, scheme) if depth is None else depth
    return ld.parameter_groups(detector, weight_decay, layer_decay, depth=depth, scheme=scheme,
                               skip_list=ld.MMCV_SKIP_LIST, base_lr=base_lr, with_group_names=True)


_REGISTERED = False


def register_modules() -> None:
    """Register the backbone and the optimizer constructor in mmdet's registries (idempotent)."""
    global _REGISTERED
    if _REGISTERED:
        return
    from mmdet.registry import HOOKS, MODELS, OPTIM_WRAPPER_CONSTRUCTORS
    from mmengine.hooks import Hook
    from mmengine.model import BaseModule
    from mmengine.optim import DefaultOptimWrapperConstructor

    class SslBenchMultiLevelBackbone(MultiLevelBackbone, BaseModule):
        """The handed-over model (a deep copy) as a multi-level mmdet backbone."""

        def __init__(self, model_key: str, out_indices=(3, 5, 7, 11), out_with_norm: bool = False,
                     rescales=None, norm: str = "syncbn", drop_path_rate: float = 0.0):
            model = copy.deepcopy(HANDOVER.take(model_key))
            for p in model.parameters():
                p.requires_grad_(True)
            if drop_path_rate > 0:  # 0: the model as its source built it
                set_drop_path(model, drop_path_rate, "drop_path_rate", "detection")
            super().__init__(model, out_indices, out_with_norm=out_with_norm, rescales=rescales, norm=norm)
            self._is_init = True

        def init_weights(self):
            """Nothing: the model's weights are its own, the rescales keep PyTorch's init."""

    class SslBenchLayerDecayConstructor(DefaultOptimWrapperConstructor):
        """``paramwise_cfg``: ``layer_decay_rate`` and ``num_layers`` (None: the model's depth)."""

        def add_params(self, params, module, prefix="", is_dcn_module=None):
            cfg = self.paramwise_cfg or {}
            params.extend(detector_groups(module, self.base_lr, self.base_wd or 0.0,
                                          float(cfg.get("layer_decay_rate", 1.0)), cfg.get("num_layers")))

    class SslBenchKeepMetrics(Hook):
        """Keeps each validation's metrics (mmengine's train loop validates after the last epoch)."""

        def __init__(self):
            self.history: list[dict] = []

        def after_val_epoch(self, runner, metrics=None) -> None:
            self.history.append(dict(metrics or {}))

    for cls in (SslBenchMultiLevelBackbone, SslBenchLayerDecayConstructor, SslBenchKeepMetrics):
        cls.__module__ = __name__
        globals()[cls.__name__] = cls
    MODELS.register_module(name=BACKBONE, module=SslBenchMultiLevelBackbone, force=True)
    HOOKS.register_module(name=KEEP_METRICS, module=SslBenchKeepMetrics, force=True)
    OPTIM_WRAPPER_CONSTRUCTORS.register_module(name=CONSTRUCTOR, module=SslBenchLayerDecayConstructor, force=True)
    _REGISTERED = True
