"""Harness ViT weights -> mmseg 1.x's ``VisionTransformer``: the key map, the architecture read
off a state dict, the mmseg backbone settings equal to it, and the converted file the backbone loads.

The key map is CrIBo's ``segmentation/tools/model_converters/dinovit2mmseg.py`` (a DINO /
timm-named ViT into mmseg 1.x names), written here as an explicit table so that every key
is accounted for: a key the table does not know is an error instead of a silently
ignored entry, and loading into the mmseg model is strict (CrIBo's and mmseg's
``init_weights`` load with ``strict=False``, which loads nothing for a wrong prefix).

    norm.*                      -> ln1.*                        (final norm)
    patch_embed.proj.*          -> patch_embed.projection.*
    blocks.i.norm1/2.*          -> layers.i.ln1/2.*
    blocks.i.attn.qkv.weight    -> layers.i.attn.attn.in_proj_weight   (q, k, v stacked alike)
    blocks.i.attn.qkv.bias      -> layers.i.attn.attn.in_proj_bias
    blocks.i.attn.proj.*        -> layers.i.attn.attn.out_proj.*
    blocks.i.mlp.fc1.*          -> layers.i.ffn.layers.0.0.*
    blocks.i.mlp.fc2.*          -> layers.i.ffn.layers.1.*
    cls_token, pos_embed        -> unchanged (pos_embed resized to the crop's grid)

The mmseg backbone is configured to return what the protocols read in the harness: the
final-normed last-layer patch tokens (``final_norm=True``, ``out_indices=[depth-1]``,
``with_cls_token=True`` so the CLS token takes part in attention, then is dropped). The
test suite checks those features equal ``ViTBackbone.get_features(...).patches`` to 1e-5.
"""
from __future__ import annotations

import math
import re
from pathlib import Path

import torch

from harness.errors import CheckpointError


# (timm-name pattern, mmseg-name template); applied to the name after an optional
# "backbone." prefix is stripped.
_KEY_MAP: tuple[tuple[str, str], ...] = (
    (r"cls_token", "cls_token"),
    (r"pos_embed", "pos_embed"),
    # the trained table of a checkpoint imported at another size (harness.models.backbone.ARCH_KEYS)
    (r"pos_embed_native", "pos_embed_native"),
    (r"patch_embed\.proj\.(weight|bias)", r"patch_embed.projection.\1"),
    (r"norm\.(weight|bias)", r"ln1.\1"),
    (r"blocks\.(\d+)\.norm([12])\.(weight|bias)", r"layers.\1.ln\2.\3"),
    (r"blocks\.(\d+)\.attn\.qkv\.(weight|bias)", r"layers.\1.attn.attn.in_proj_\2"),
    (r"blocks\.(\d+)\.attn\.proj\.(weight|bias)", r"layers.\1.attn.attn.out_proj.\2"),
    (r"blocks\.(\d+)\.mlp\.fc1\.(weight|bias)", r"layers.\1.ffn.layers.0.0.\2"),
    (r"blocks\.(\d+)\.mlp\.fc2\.(weight|bias)", r"layers.\1.ffn.layers.1.\2"),
)
_COMPILED = tuple((re.compile(p + r"\Z"), t) for p, t in _KEY_MAP)
# Keys of pretraining checkpoints that evaluation does not use (CrIBo's converter drops
# head*; mask_token is iBOT's student-only masked embedding).
_DROPPED = re.compile(r"(head\.|head_|mask_token\Z)")


def map_key(key: str) -> str | None:
    """mmseg name of a timm/DINO name; None for keys evaluation drops; error if unknown."""
    if key.startswith("backbone."):
        key = key[len("backbone."):]
    if _DROPPED.match(key):
        return None
    for pattern, template in _COMPILED:
        if pattern.match(key):
            return pattern.sub(template, key)
    raise CheckpointError(
        f"backbone key {key!r} has no mmseg VisionTransformer counterpart; the mmseg protocols "
        f"support plain ViTs (CLS token, absolute position embeddings, no register tokens, "
        f"no fc_norm). Expected keys like cls_token, pos_embed, patch_embed.proj.*, "
        f"blocks.i.{{norm1,attn.qkv,attn.proj,norm2,mlp.fc1,mlp.fc2}}.*, norm.*")


def convert_state_dict(state_dict: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """timm / DINO-layout ViT state dict -> mmseg ``VisionTransformer`` state dict."""
    out: dict[str, torch.Tensor] = {}
    for key, value in state_dict.items():
        new = map_key(key)
        if new is None:
            continue
        if new in out:
            raise CheckpointError(f"two checkpoint keys map to {new!r} (one is {key!r}); is the "
                                  f"'backbone.' prefix present on only some keys?")
        out[new] = value
    return out


def describe_vit(state_dict: dict[str, torch.Tensor]) -> dict:
    """Architecture read off a timm-named ViT state dict (everything but the head count)."""
    sd = {k[len("backbone."):] if k.startswith("backbone.") else k: v for k, v in state_dict.items()}
    required = ("cls_token", "pos_embed", "patch_embed.proj.weight", "norm.weight")
    missing = [k for k in required if k not in sd]
    if missing:
        raise CheckpointError(f"not a ViT state dict with a CLS token and a final norm: missing {missing}")
    if "reg_token" in sd:
        raise CheckpointError("register tokens are not supported by mmseg's VisionTransformer")
    depth = 1 + max((int(m.group(1)) for k in sd if (m := re.match(r"blocks\.(\d+)\.", k))), default=-1)
    if depth == 0:
        raise CheckpointError("no transformer blocks (blocks.i.*) in the state dict")
    embed_dim = sd["cls_token"].shape[-1]
    patch = sd["patch_embed.proj.weight"].shape[-1]
    n_pos = sd["pos_embed"].shape[1]
    side = math.isqrt(n_pos - 1)
    if side * side != n_pos - 1:
        raise CheckpointError(f"pos_embed holds {n_pos} tokens: expected 1 (CLS) + a square grid; "
                              f"checkpoints without a CLS position (no_embed_class) are not supported")
    hidden = sd["blocks.0.mlp.fc1.weight"].shape[0]
    return {
        "embed_dims": int(embed_dim),
        "num_layers": int(depth),
        "patch_size": int(patch),
        "mlp_ratio": hidden / embed_dim,
        "qkv_bias": "blocks.0.attn.qkv.bias" in sd,
        "pos_grid": (side, side),
        "patch_bias": "patch_embed.proj.bias" in sd,
    }


def backbone_kwargs(state_dict: dict[str, torch.Tensor], num_heads: int, crop_size: int,
                    drop_path_rate: float) -> dict:
    """mmseg ``VisionTransformer`` settings equal to the harness ViT that ``state_dict`` is from.

    Matches Segmenter's mmseg configs (LN eps 1e-6, final_norm, CLS token, bicubic position
    resizing) with ``img_size`` = the crop, so the stored position embeddings are resized
    once, at load, to the crop's grid (as mmseg does for CrIBo's converted checkpoints).
    """
    arch = describe_vit(state_dict)
    mlp_ratio = arch["mlp_ratio"]
    if abs(mlp_ratio - round(mlp_ratio)) > 1e-9:
        raise CheckpointError(f"mlp ratio {mlp_ratio} is not an integer; mmseg's ViT needs one")
    if crop_size % arch["patch_size"]:
        raise CheckpointError(f"crop {crop_size} is not a multiple of the patch size {arch['patch_size']}")
    if arch["embed_dims"] % num_heads:
        raise CheckpointError(f"embed dim {arch['embed_dims']} is not divisible by {num_heads} heads")
    return dict(
        img_size=(crop_size, crop_size),
        patch_size=arch["patch_size"],
        in_channels=3,
        embed_dims=arch["embed_dims"],
        num_layers=arch["num_layers"],
        num_heads=num_heads,
        mlp_ratio=int(round(mlp_ratio)),
        out_indices=[arch["num_layers"] - 1],  # the last block's output ...
        final_norm=True,                       # ... after the final norm
        with_cls_token=True,
        output_cls_token=False,
        qkv_bias=arch["qkv_bias"],
        patch_bias=arch["patch_bias"],
        drop_rate=0.0,
        attn_drop_rate=0.0,
        drop_path_rate=drop_path_rate,
        norm_cfg=dict(type="LN", eps=1e-6, requires_grad=True),
        act_cfg=dict(type="GELU"),
        interpolate_mode="bicubic",
    )


def save_converted(state_dict: dict[str, torch.Tensor], path: Path) -> Path:
    """Write the converted weights as safetensors (no pickle) for the mmseg backbone to load."""
    from safetensors.torch import save_file

    from harness.io_utils import atomic_write

    converted = {k: v.detach().to("cpu").contiguous() for k, v in convert_state_dict(state_dict).items()}
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, lambda p: save_file(converted, str(p)))
    return path


def vit_mismatch(backbone_state_dict: dict[str, torch.Tensor]) -> str | None:
    """Why mmseg's VisionTransformer cannot compute a ViT with these weights (register tokens,
    layer scale, SwiGLU, no CLS position, a fractional MLP ratio), or None when it can."""
    try:
        convert_state_dict(backbone_state_dict)
        mlp_ratio = describe_vit(backbone_state_dict)["mlp_ratio"]
    except CheckpointError as exc:
        return str(exc)
    if abs(mlp_ratio - round(mlp_ratio)) > 1e-9:
        return f"mlp ratio {mlp_ratio} is not an integer; mmseg's ViT needs one"
    return None
