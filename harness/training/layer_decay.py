"""Layer-wise learning-rate decay: the one parameter grouping every fine-tuning task uses.

It reproduces BEiT's rule as iBOT ships it in three places (bytedance/ibot at da316d8):

- ``evaluation/classification_layer_decay/optim_factory.py`` (image classification):
  ``get_num_layer_for_vit`` gives ``cls_token`` / ``mask_token`` / ``pos_embed`` and
  ``patch_embed*`` layer 0, ``blocks.<i>.*`` layer i + 1, ``rel_pos_bias*`` and everything else
  (the final norm, ``fc_norm``, the head) the last layer, num_layers + 1.
  ``LayerDecayValueAssigner`` scales layer i by ``layer_decay ** (num_layers + 1 - i)`` (the head
  trains at the base lr). ``get_parameter_groups`` puts a parameter in ``no_decay`` (weight decay
  0) when it is 1-d, its name ends in ``.bias``, or its name is in the skip list, which
  ``run_class_finetuning.py`` takes from ``model.no_weight_decay()`` (``{'pos_embed', 'cls_token'}``
  for iBOT's ViT); groups are named ``layer_<id>_decay`` / ``layer_<id>_no_decay`` and come in the
  order their first parameter appears in ``named_parameters()``. Frozen parameters are left out.
  With ``layer_decay`` 1.0 no assigner is built: the groups are plain ``decay`` / ``no_decay``
  with lr scale 1 (:func:`parameter_groups` does the same).
- ``evaluation/object_detection/mmcv_custom/layer_decay_optimizer_constructor.py`` and
  ``evaluation/semantic_segmentation/mmcv_custom/layer_decay_optimizer_constructor.py`` (the two
  files are identical). Differences from the classification rule, each supported here:

  1. names carry the detector's prefix: ``backbone.cls_token`` / ``backbone.mask_token`` /
     ``backbone.pos_embed`` / ``backbone.patch_embed*`` are layer 0, ``backbone.blocks.<i>.*``
     layer i + 1, everything else (neck, heads, ``backbone.norm``...) the last layer
     (``prefix="backbone."``). ``rel_pos_bias`` has no rule of its own there; it falls in the
     last layer all the same.
  2. the depth is the config's ``paramwise_cfg.num_layers`` (``depth`` here), not counted
     from the model; the scale ``layer_decay_rate ** (num_layers + 2 - layer_id - 1)`` is the
     classification scale.
  3. the skip list is the bare ``('pos_embed', 'cls_token')`` compared with the prefixed names,
     so it never matches: ``backbone.pos_embed`` and ``backbone.cls_token`` (3-d) ARE weight
     decayed in the official detection and segmentation runs. ``skip_list=MMCV_SKIP_LIST``
     reproduces that; the classification rule is the default.
  4. each group also holds its ``lr`` (``lr_scale * base_lr``) and its ``group_name``
     (``base_lr=...``, ``with_group_names=True``). mmcv's constructor sets the group weight decay
     from ``base_wd``, as ``weight_decay`` here.

A model whose blocks are not named ``blocks.<i>`` (an adapted transformers or open_clip model)
is grouped by the same rule with its own block list and embedding names, found by
:func:`layer_scheme`; a model without blocks to decay is a ConfigError naming what it has and
the fix (``layer_decay=1.0``).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable

from torch import nn

from harness.errors import ConfigError

# The skip list of iBOT's detection / segmentation constructors: bare names that never match the
# prefixed parameter names (see the module docstring, difference 3).
MMCV_SKIP_LIST = ("pos_embed", "cls_token")

# Block containers the grouping knows, with the parameter names of what runs before the first
# block (layer 0): the harness / timm / iBOT ViT first (the official names), then transformers'
# ViT / DINOv2 and CLIP / SigLIP towers and open_clip's visual tower. ``reg_token`` (timm's register tokens) is an
# embedding as in timm's ``param_groups_layer_decay``; iBOT's ViT has none.
_KNOWN_BLOCKS = (
    ("blocks", ("cls_token", "mask_token", "pos_embed", "reg_token"), ("patch_embed",)),
    ("encoder.layer", (), ("embeddings",)),
    ("encoder.layers", (), ("embeddings", "pre_layrnorm")),  # transformers' CLIP / SigLIP vision towers
    ("transformer.resblocks", ("class_embedding", "positional_embedding"), ("conv1", "ln_pre")),
)


@dataclass(frozen=True)
class LayerScheme:
    """How parameter names map to layer ids: ``prefix`` + ``blocks`` + ``.<i>.`` is block i
    (layer i + 1); ``prefix`` + an ``embed_names`` entry, or a name starting with ``prefix`` +
    an ``embed_prefixes`` entry, is layer 0; every other name is the last layer."""

    prefix: str = ""
    blocks: str = "blocks"
    embed_names: tuple[str, ...] = ("cls_token", "mask_token", "pos_embed")
    embed_prefixes: tuple[str, ...] = ("patch_embed",)
    last_prefixes: tuple[str, ...] = ("rel_pos_bias",)

    def layer_id(self, name: str, num_layers: int) -> int:
        """The official ``get_num_layer_for_vit`` with ``num_max_layer = num_layers + 2``."""
        last = num_layers + 1
        if not name.startswith(self.prefix):
            return last
        local = name[len(self.prefix):]
        if local in self.embed_names or local.startswith(self.embed_prefixes):
            return 0
        if local.startswith(self.last_prefixes):
            return last
        if local.startswith(self.blocks + "."):
            return int(local[len(self.blocks) + 1:].split(".")[0]) + 1
        return last


def layer_scales(layer_decay: float, num_layers: int) -> list[float]:
    """``LayerDecayValueAssigner.values``: the lr scale of layer 0 .. num_layers + 1."""
    return [layer_decay ** (num_layers + 1 - i) for i in range(num_layers + 2)]


def _block_list(model: nn.Module, path: str) -> nn.ModuleList | nn.Sequential | None:
    try:
        found = model.get_submodule(path)
    except AttributeError:
        return None
    return found if isinstance(found, (nn.ModuleList, nn.Sequential)) and len(found) else None


def layer_scheme(model: nn.Module, prefix: str = "") -> LayerScheme:
    """The scheme of ``model`` (or of its submodule at ``prefix``, e.g. ``backbone.``): the first
    known block list found there or under an adapter's wrapped model (``model.``, ``model.visual.``,
    ``model.vision_model.``). A ConfigError says what the model has when none is found."""
    root = model.get_submodule(prefix.rstrip(".")) if prefix else model
    for inner in ("", "model.", "model.visual.", "model.vision_model.", "visual.", "vision_model."):
        for blocks, names, prefixes in _KNOWN_BLOCKS:
            if _block_list(root, inner + blocks) is not None:
                return LayerScheme(prefix=prefix + inner, blocks=blocks, embed_names=names,
                                   embed_prefixes=prefixes)
    inner = getattr(root, "model", None)
    shown, what = (inner, f"{type(root).__name__} wrapping {type(inner).__name__}") if isinstance(inner, nn.Module) \
        else (root, type(root).__name__)
    children = ", ".join(f"{n} ({type(m).__name__})" for n, m in shown.named_children()) or "no submodules"
    raise ConfigError(
        f"layer-wise lr decay needs a model made of numbered transformer blocks (a 'blocks', "
        f"'encoder.layer(s)' or 'transformer.resblocks' list); {what} has {children}. "
        f"Set layer_decay=1.0 to fine-tune it with one learning rate")


def num_layers(model: nn.Module, scheme: LayerScheme | None = None) -> int:
    """How many blocks the scheme's block list holds (``get_num_layers()`` of iBOT's ViT)."""
    scheme = scheme or layer_scheme(model)
    blocks = _block_list(model, scheme.prefix + scheme.blocks)
    if blocks is None:
        raise ConfigError(f"{type(model).__name__} has no block list at {scheme.prefix + scheme.blocks!r}; "
                          f"set layer_decay=1.0 to fine-tune it with one learning rate")
    return len(blocks)


def default_skip_list(model: nn.Module, prefix: str = "") -> set[str]:
    """``model.no_weight_decay()`` of the module at ``prefix``, as full parameter names."""
    root = model.get_submodule(prefix.rstrip(".")) if prefix else model
    fn = getattr(root, "no_weight_decay", None)
    return {prefix + n for n in fn()} if callable(fn) else set()


def _no_decay(name: str, shape: tuple[int, ...], skip: set[str]) -> bool:
    return len(shape) == 1 or name.endswith(".bias") or name in skip


def group_table(model: nn.Module, weight_decay: float, layer_decay: float, *,
                depth: int | None = None, scheme: LayerScheme | None = None,
                skip_list: Iterable[str] | None = None) -> dict[str, dict[str, Any]]:
    """The official ``parameter_group_names``: group name -> weight_decay, lr_scale and the
    parameter names, in the official order. See :func:`parameter_groups` for the arguments."""
    return {name: {"weight_decay": g["weight_decay"], "lr_scale": g["lr_scale"], "params": names}
            for name, g, names in _grouped(model, weight_decay, layer_decay, depth, scheme, skip_list)}


def parameter_groups(model: nn.Module, weight_decay: float, layer_decay: float, *,
                     depth: int | None = None, scheme: LayerScheme | None = None,
                     skip_list: Iterable[str] | None = None, base_lr: float | None = None,
                     with_group_names: bool = False) -> list[dict[str, Any]]:
    """The optimizer's parameter groups (``params``, ``weight_decay``, ``lr_scale``; ``lr`` when
    ``base_lr`` is given, ``group_name`` with ``with_group_names``), as ``get_parameter_groups``
    with ``LayerDecayValueAssigner`` gives them.

    ``layer_decay`` >= 1.0 builds no assigner (groups ``decay`` / ``no_decay``, scale 1), as the
    official script does. ``depth`` defaults to the model's block count (the mmcv
    constructors take it from the config). ``scheme`` defaults to :func:`layer_scheme` of the
    model; pass ``LayerScheme(prefix="backbone.")`` for mmdet / mmseg names. ``skip_list``
    (full names) defaults to the model's ``no_weight_decay()`` at the scheme's prefix;
    ``MMCV_SKIP_LIST`` reproduces the detection / segmentation constructors."""
    groups = []
    for name, group, _ in _grouped(model, weight_decay, layer_decay, depth, scheme, skip_list):
        if base_lr is not None:
            group["lr"] = group["lr_scale"] * base_lr
        if with_group_names:
            group["group_name"] = name
        groups.append(group)
    return groups


def _grouped(model, weight_decay, layer_decay, depth, scheme, skip_list):
    """(group name, group dict, parameter names) in order of first appearance."""
    decayed = layer_decay < 1.0
    if decayed:
        scheme = scheme or layer_scheme(model)
        depth = num_layers(model, scheme) if depth is None else int(depth)
        scales = layer_scales(layer_decay, depth)
    prefix = scheme.prefix if scheme is not None else _adapter_prefix(model)
    skip = set(skip_list) if skip_list is not None else default_skip_list(model, _owner_prefix(model, prefix))
    table: dict[str, tuple[dict[str, Any], list[str]]] = {}
    for name, param in model.named_parameters():
        if not param.requires_grad:
            continue
        no_decay = _no_decay(name, tuple(param.shape), skip)
        kind = "no_decay" if no_decay else "decay"
        layer = scheme.layer_id(name, depth) if decayed else None
        key = f"layer_{layer}_{kind}" if decayed else kind
        if key not in table:
            table[key] = ({"weight_decay": 0.0 if no_decay else weight_decay, "params": [],
                           "lr_scale": scales[layer] if decayed else 1.0}, [])
        table[key][0]["params"].append(param)
        table[key][1].append(name)
    return [(key, group, names) for key, (group, names) in table.items()]


def _adapter_prefix(model: nn.Module) -> str:
    try:
        return layer_scheme(model).prefix
    except ConfigError:
        return ""


def _owner_prefix(model: nn.Module, prefix: str) -> str:
    """The deepest module along ``prefix`` that states ``no_weight_decay()`` (the ViT inside a
    classifier or an adapter), as a prefix; "" when none does."""
    parts = [p for p in prefix.split(".") if p]
    for cut in range(len(parts), -1, -1):
        sub = ".".join(parts[:cut])
        module = model.get_submodule(sub) if sub else model
        if callable(getattr(module, "no_weight_decay", None)):
            return sub + "." if sub else ""
    return ""


def describe(groups: list[dict[str, Any]]) -> str:
    """One line per group: name (if present), lr scale, weight decay, tensor count."""
    return "\n".join(f"{g.get('group_name', i)}: lr_scale={g['lr_scale']:.6g} wd={g['weight_decay']:g} "
                     f"tensors={len(g['params'])}" for i, g in enumerate(groups))

