"""The last attention block of a ViT, wherever the model keeps it: the harness ViT and timm ViTs
(``blocks[-1].attn.qkv``, one fused projection), transformers ViT / DINOv2 / CLIP / SigLIP
(the last layer's query / key / value or q_proj / k_proj / v_proj, wherever the installed version
keeps its layers) and open_clip ViT towers
(``transformer.resblocks[-1].attn``, a ``nn.MultiheadAttention``), each found inside its adapter
(``backbone.model``). The protocols that read a ViT's attention or keys (LOST, TokenCut, the
robustness protocol's occlusion saliency) ask here, so that every one of them reads every model
alike and refuses the same ones with the same words.

Queries, keys and values are the projections' outputs, every token (prefix tokens first, then the
patches row by row), heads concatenated: what LOST's hook on ``attn.qkv`` takes, split in three.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F

from harness.errors import ConfigError, NotApplicable


@dataclass
class LastAttention:
    """Where the last block's q, k, v come from: ``layout`` "fused" (one Linear giving q|k|v),
    "separate" (three Linears) or "in_proj" (a MultiheadAttention's packed input projection)."""
    layout: str
    heads: int
    modules: tuple[nn.Module, ...]
    batch_first: bool = True


def _last(seq) -> nn.Module | None:
    return seq[-1] if isinstance(seq, (nn.Sequential, nn.ModuleList)) and len(seq) else None


def _timm_style(root: nn.Module) -> LastAttention | None:
    attn = getattr(_last(getattr(root, "blocks", None)), "attn", None)
    if isinstance(getattr(attn, "qkv", None), nn.Linear):
        return LastAttention("fused", int(attn.num_heads), (attn.qkv,))
    return None


def _path(root: nn.Module, dotted: str):
    for name in dotted.split("."):
        root = getattr(root, name, None)
    return root


# where transformers keeps the layers (the layout changed across versions) and, in a layer, the
# attention with its three projections
_HF_LAYERS = ("encoder.layer", "layers", "encoder.layers", "vision_model.encoder.layers")
_HF_ATTENTION = ("attention.attention", "attention", "self_attn")
_HF_PROJECTIONS = (("query", "key", "value"), ("q_proj", "k_proj", "v_proj"))


def _transformers(root: nn.Module) -> LastAttention | None:
    for layers in _HF_LAYERS:
        layer = _last(_path(root, layers))
        for where in _HF_ATTENTION if layer is not None else ():
            inner = _path(layer, where)
            for names in _HF_PROJECTIONS:
                parts = tuple(getattr(inner, n, None) for n in names)
                if all(isinstance(p, nn.Linear) for p in parts):
                    heads = (getattr(inner, "num_attention_heads", None) or getattr(inner, "num_heads", None)
                             or getattr(getattr(root, "config", None), "num_attention_heads", None))
                    return LastAttention("separate", int(heads), parts)
    return None


def _open_clip(root: nn.Module) -> LastAttention | None:
    attn = getattr(_last(getattr(getattr(root, "transformer", None), "resblocks", None)), "attn", None)
    if isinstance(attn, nn.MultiheadAttention) and attn.in_proj_weight is not None:
        return LastAttention("in_proj", int(attn.num_heads), (attn,), bool(attn.batch_first))
    return None


FINDERS = (_timm_style, _transformers, _open_clip)


def last_attention(backbone: nn.Module) -> LastAttention | None:
    """The last attention block of the ViT that ``backbone`` is or wraps (an adapter's ``model``);
    None for a model without one (a CNN, a Swin's windowed attention, a user's feature function)."""
    for root in (backbone, getattr(backbone, "model", None)):
        if isinstance(root, nn.Module):
            for find in FINDERS:
                found = find(root)
                if found is not None:
                    return found
    return None


def model_words(backbone: nn.Module, name: str | None = None) -> str:
    """How a refusal names the model: its name where known, and its architecture."""
    arch = getattr(backbone, "arch", None) or type(backbone).__name__
    return f"model {name} ({arch})" if name else f"model {arch!r}"


def missing_attention(backbone: nn.Module, what: str, name: str | None = None) -> str | None:
    """Why ``what`` cannot read ``backbone``'s attention (one sentence), or None when it can."""
    if last_attention(backbone) is not None:
        return None
    return (f"{what} needs a ViT's last attention block (its [CLS] token, queries and keys), and the "
            f"{model_words(backbone, name)} has none that ssl-bench reads (read: timm / harness ViTs' "
            "blocks[-1].attn.qkv, transformers ViT / DINOv2 / CLIP / SigLIP, open_clip ViT towers; "
            "a CNN, a Swin's windowed attention or a feature function have none)")


def require_attention(backbone: nn.Module, what: str, name: str | None = None) -> LastAttention:
    """The last attention block, or NotApplicable saying why there is none."""
    reason = missing_attention(backbone, what, name)
    if reason is not None:
        raise NotApplicable(reason)
    return last_attention(backbone)


def last_block_qkv(backbone: nn.Module, x: torch.Tensor, what: str = "this protocol",
                   name: str | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, int]:
    """(q, k, v, heads): each (B, tokens, width), the last block's projections of every token of
    ``x``, from one forward pass of the backbone's feature path."""
    found = require_attention(backbone, what, name)
    caught: dict[str, torch.Tensor] = {}
    hooks = _hooks(found, caught)
    try:
        backbone.get_features(x, n_last_blocks=1, final_norm=True)
    finally:
        for h in hooks:
            h.remove()
    if len(caught) < (3 if found.layout == "separate" else 1):
        raise ConfigError(f"{what}: the last attention block of the {model_words(backbone, name)} was not called in "
                          "its feature pass (an attention computing q, k, v another way)")
    if found.layout == "separate":
        return caught["q"], caught["k"], caught["v"], found.heads
    q, k, v = caught["qkv"].chunk(3, dim=-1)
    return q, k, v, found.heads


def _hooks(found: LastAttention, caught: dict) -> list:
    if found.layout == "fused":
        return [found.modules[0].register_forward_hook(lambda _m, _i, out: caught.__setitem__("qkv", out))]
    if found.layout == "separate":
        return [m.register_forward_hook(lambda _m, _i, out, key=key: caught.__setitem__(key, out))
                for m, key in zip(found.modules, "qkv")]
    attn = found.modules[0]

    def packed(_m, args, kwargs):
        x = args[0] if args else kwargs["query"]
        x = x if found.batch_first else x.transpose(0, 1)
        caught["qkv"] = F.linear(x, attn.in_proj_weight, attn.in_proj_bias)
    return [attn.register_forward_pre_hook(packed, with_kwargs=True)]


def cls_attention_rows(backbone: nn.Module, x: torch.Tensor, head: int, what: str = "saliency",
                       name: str | None = None) -> torch.Tensor:
    """(B, h*w): the last block's attention of the first token ([CLS]) to each patch, for one
    head (softmax(q k^T / sqrt(head width)) over every token, the prefix tokens then left out)."""
    q, k, _, heads = last_block_qkv(backbone, x, what, name)
    if not 0 <= head < heads:
        raise ConfigError(f"{what}: saliency_head {head} but the {model_words(backbone, name)} has {heads} heads")
    b, n, width = q.shape
    q = q.reshape(b, n, heads, width // heads)[:, :1, head]
    k = k.reshape(b, n, heads, width // heads)[:, :, head]
    scores = (q @ k.transpose(-2, -1)) * (q.shape[-1] ** -0.5)
    h, w = x.shape[-2] // backbone.patch_size, x.shape[-1] // backbone.patch_size
    return scores.softmax(-1)[:, 0, n - h * w:]


def patch_tokens(tokens: torch.Tensor, x: torch.Tensor, patch_size: int, what: str = "this protocol") -> torch.Tensor:
    """The patch tokens of ``tokens`` (B, N, D): the last h*w, the prefix tokens dropped."""
    h, w = x.shape[-2] // patch_size, x.shape[-1] // patch_size
    prefix = tokens.shape[1] - h * w
    if prefix < 0:
        raise ConfigError(f"{what}: the last block saw {tokens.shape[1]} tokens, fewer than the {h}x{w} patch grid")
    return tokens[:, prefix:]
