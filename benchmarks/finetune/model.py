"""The network that is fine-tuned: a model's backbone with iBOT's classification head.

As ``modeling_finetune.VisionTransformer`` of iBOT (BEiT) builds it (bytedance/ibot at da316d8):

- ``use_mean_pooling`` (the argparse default): the final norm becomes an identity and ``fc_norm``
  (a fresh LayerNorm, weight 1, bias 0) normalises the mean of the patch tokens; ``--use_cls``:
  the class token after the backbone's final norm. Register tokens are no patches: they are left
  out of the mean.
- the head: a Linear whose weight is drawn trunc-normal with std .02 and whose bias is 0, then both
  multiplied by ``init_scale`` (0.001).
- from the projection head (``finetune_head_layer`` k > 0, ``semi_supervised/eval_cls.py``'s
  ``ClassProjHead``): the pretraining head's first k Linear layers, each followed by GELU, with
  their pretrained weights, then the classifier Linear from the head's hidden width.
- stochastic depth: ``torch.linspace(0, drop_path, depth)`` over the blocks, timm's ``DropPath``
  (the official Block calls timm's ``drop_path`` too, once after attention and once after the MLP).

The backbone is a copy: the model handle the run was given is never changed.
"""
from __future__ import annotations

import copy

import torch
from torch import nn

from harness.errors import ConfigError
from harness.training.drop_path import set_drop_path


def _final_norm_path(backbone: nn.Module) -> str | None:
    """Where the backbone keeps the final norm that mean pooling replaces (the harness ViT and
    timm's: ``norm``; a timm adapter: ``model.norm``)."""
    for path in ("norm", "model.norm"):
        try:
            module = backbone.get_submodule(path)
        except AttributeError:
            continue
        if isinstance(module, nn.LayerNorm):
            return path
    return None


def _pretrained_mlp(head_layers: list, dim: int) -> nn.Sequential:
    """Linear + GELU per (weight, bias) of a pretraining head, holding those weights."""
    if head_layers[0][0].shape[1] != dim:
        raise ConfigError(f"finetune: the projection head takes {head_layers[0][0].shape[1]} features, the "
                          f"backbone gives {dim}: the head is not this backbone's")
    layers: list[nn.Module] = []
    for weight, bias in head_layers:
        linear = nn.Linear(weight.shape[1], weight.shape[0])
        with torch.no_grad():
            linear.weight.copy_(weight)
            linear.bias.copy_(bias)
        layers += [linear, nn.GELU()]
    return nn.Sequential(*layers)


class FinetuneClassifier(nn.Module):
    """``backbone`` + (``fc_norm``) + ``head``; parameter names ``backbone.blocks.<i>...``,
    ``fc_norm.*``, ``head.*`` (the official names under the ``backbone.`` prefix)."""

    def __init__(self, backbone: nn.Module, num_classes: int, *, use_mean_pooling: bool, init_scale: float,
                 drop_path: float, seed: int, head_layers: list | None = None):
        super().__init__()
        from timm.layers import trunc_normal_

        self.backbone = copy.deepcopy(backbone)
        self.use_mean_pooling = use_mean_pooling
        dim = int(self.backbone.embed_dim)
        self.kept_norm: dict[str, torch.Tensor] = {}
        eps = 1e-6
        if use_mean_pooling:
            path = _final_norm_path(self.backbone)
            if path is not None:
                norm = self.backbone.get_submodule(path)
                eps = norm.eps
                # kept for the exported backbone: other protocols read features through it
                self.kept_norm = {f"{path}.{k}": v.detach().clone() for k, v in norm.state_dict().items()}
                parent, _, leaf = path.rpartition(".")
                setattr(self.backbone.get_submodule(parent) if parent else self.backbone, leaf, nn.Identity())
        self.fc_norm = nn.LayerNorm(dim, eps=eps) if use_mean_pooling else None
        self.head_mlp = _pretrained_mlp(head_layers, dim) if head_layers else None
        self.head = nn.Linear(head_layers[-1][0].shape[0] if head_layers else dim, num_classes)
        with torch.random.fork_rng():
            torch.manual_seed(seed)
            trunc_normal_(self.head.weight, std=.02)
        nn.init.zeros_(self.head.bias)
        with torch.no_grad():
            self.head.weight.mul_(init_scale)
            self.head.bias.mul_(init_scale)
        if drop_path > 0:  # 0: the model as its source built it
            set_drop_path(self.backbone, drop_path, owner="finetune")

    def no_weight_decay(self) -> set[str]:
        """The backbone's ``no_weight_decay()`` (timm's ViT: pos_embed, cls_token, dist_token)."""
        inner = self.backbone
        for attr in ("", "model"):
            module = getattr(inner, attr) if attr else inner
            fn = getattr(module, "no_weight_decay", None)
            if callable(fn):
                prefix = "backbone." + (attr + "." if attr else "")
                return {prefix + n for n in fn()}
        return set()

    def features(self, x: torch.Tensor) -> torch.Tensor:
        out = self.backbone.get_features(x, 1, final_norm=not self.use_mean_pooling)
        if self.use_mean_pooling:
            patches = out.patches[:, -1]
            return self.fc_norm(patches.flatten(1, 2).mean(1))
        return out.cls[:, -1]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.features(x)
        return self.head(self.head_mlp(x) if self.head_mlp is not None else x)

    def backbone_state(self) -> dict[str, torch.Tensor]:
        """The backbone's weights as a harness checkpoint holds them (the final norm the mean
        pooling set aside put back, the student-only mask token left out)."""
        own = getattr(self.backbone, "backbone_state_dict", None)
        state = own() if callable(own) else self.backbone.state_dict()
        return {**{k: v.detach().cpu() for k, v in state.items()}, **self.kept_norm}

    def head_state(self) -> dict[str, torch.Tensor]:
        state = {f"head.{k}": v for k, v in self.head.state_dict().items()}
        for name in ("fc_norm", "head_mlp"):
            module = getattr(self, name)
            if module is not None:
                state.update({f"{name}.{k}": v for k, v in module.state_dict().items()})
        return {k: v.detach().cpu() for k, v in state.items()}
