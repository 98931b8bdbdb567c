"""Matmul FLOPs of a ViT forward, counted from the architecture (2 FLOPs per multiply-add).

Counted: patch embedding (a conv = a GEMM), and per block qkv, attention (Q K^T and A V),
proj, MLP (fc1, fc2). Not counted: LayerNorm, softmax, GELU, bias and residual adds, the
position-embedding add (all O(tokens x dim), < 1% of the total for ViT-S/B). The same
convention as timm's / fvcore's "GMACs x 2" for ViTs, so GFLOP/s numbers are comparable.

    vit_flops(embed_dim=384, depth=12, num_heads=6, patch_size=16, height=224, width=224)
    -> {'total': 9.2e9, 'patch_embed': ..., 'qkv': ..., 'attn': ..., 'proj': ..., 'mlp': ...}

One counter for the paper-reproduction cost estimates (harness.paper.plan) and the speed
experiments (experiments/).
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class VitShape:
    embed_dim: int
    depth: int
    num_heads: int
    patch_size: int
    mlp_hidden: int
    prefix_tokens: int = 1
    in_chans: int = 3

    @classmethod
    def of(cls, backbone) -> "VitShape":
        """From a ViTBackbone / timm VisionTransformer instance."""
        return cls(embed_dim=backbone.embed_dim, depth=len(backbone.blocks),
                   num_heads=backbone.blocks[0].attn.num_heads,
                   patch_size=backbone.patch_embed.patch_size[0],
                   mlp_hidden=backbone.blocks[0].mlp.fc1.out_features,
                   prefix_tokens=backbone.num_prefix_tokens,
                   in_chans=backbone.patch_embed.proj.in_channels)

    @classmethod
    def of_arch(cls, arch: str, **overrides) -> "VitShape":
        """From a harness preset name (harness.models.backbone.ARCHS) without building the model."""
        from harness.models.backbone import arch_kwargs_for

        kw = arch_kwargs_for(arch, **overrides)
        d = kw["embed_dim"]
        return cls(embed_dim=d, depth=kw["depth"], num_heads=kw["num_heads"], patch_size=kw["patch_size"],
                   mlp_hidden=int(d * kw.get("mlp_ratio", 4.0)), prefix_tokens=1 + kw.get("reg_tokens", 0))


def _component_flops(embed_dim: int, depth: int, patch_size: int, patches: int, prefix_tokens: int,
                     mlp_hidden: float, in_chans: int) -> dict[str, float]:
    """Matmul FLOPs of one image of `patches` patch tokens, per component and 'total'."""
    d = embed_dim
    t = patches + prefix_tokens
    macs = {
        "patch_embed": patches * (in_chans * patch_size * patch_size) * d,
        "qkv": depth * t * d * 3 * d,
        "attn": depth * 2 * t * t * d,  # Q K^T and A V, all heads together
        "proj": depth * t * d * d,
        "mlp": depth * 2 * t * d * mlp_hidden,
    }
    out = {k: 2.0 * v for k, v in macs.items()}
    out["total"] = sum(out.values())
    return out


def vit_flops(embed_dim: int, depth: int, num_heads: int, patch_size: int, height: int, width: int,
              mlp_hidden: int | None = None, prefix_tokens: int = 1, in_chans: int = 3) -> dict[str, float]:
    """Matmul FLOPs of one image, per component and 'total'. num_heads does not change the
    count (heads split the attention matmuls, they do not add to them); it is validated."""
    if embed_dim % num_heads:
        raise ValueError(f"embed_dim {embed_dim} is not divisible by num_heads {num_heads}")
    if height % patch_size or width % patch_size:
        raise ValueError(f"{height}x{width} is not a multiple of the patch size {patch_size}")
    hid = mlp_hidden if mlp_hidden is not None else 4 * embed_dim
    n = (height // patch_size) * (width // patch_size)
    return _component_flops(embed_dim, depth, patch_size, n, prefix_tokens, hid, in_chans)


def arch_flops(arch_kwargs: dict, h: int, w: int) -> float:
    """Forward FLOPs of a harness architecture (harness.models.backbone.ARCHS entry) on one h x w
    image; a side that is not a multiple of the patch size is cropped to one, as the patch
    embedding does."""
    p, d = arch_kwargs["patch_size"], arch_kwargs["embed_dim"]
    return _component_flops(d, arch_kwargs["depth"], p, (h // p) * (w // p), 1 + arch_kwargs.get("reg_tokens", 0),
                            d * arch_kwargs.get("mlp_ratio", 4.0), 3)["total"]


def token_flops(shape: "VitShape", patches: int) -> float:
    """Total matmul FLOPs of one image of `patches` patch tokens (any aspect ratio)."""
    return _component_flops(shape.embed_dim, shape.depth, shape.patch_size, patches, shape.prefix_tokens,
                            shape.mlp_hidden, shape.in_chans)["total"]


def shape_flops(shape: VitShape, height: int, width: int) -> float:
    return vit_flops(shape.embed_dim, shape.depth, shape.num_heads, shape.patch_size, height, width,
                     shape.mlp_hidden, shape.prefix_tokens, shape.in_chans)["total"]


def backbone_flops(backbone, height: int, width: int) -> float:
    """Total matmul FLOPs of one height x width image through `backbone`."""
    return shape_flops(VitShape.of(backbone), height, width)


def gemm_shapes(shape: VitShape, height: int, width: int, batch: int) -> list[tuple[str, int, int, int, int, int]]:
    """The matmuls of one forward of `batch` images: (name, batch_count, M, K, N, calls).
    batch_count > 1 is a batched matmul (attention: one per image and head)."""
    d, h = shape.embed_dim, shape.num_heads
    n = (height // shape.patch_size) * (width // shape.patch_size)
    t = n + shape.prefix_tokens
    L = shape.depth
    return [
        ("patch_embed", 1, batch * n, shape.in_chans * shape.patch_size ** 2, d, 1),
        ("qkv", 1, batch * t, d, 3 * d, L),
        ("attn_qk", batch * h, t, d // h, t, L),
        ("attn_av", batch * h, t, t, d // h, L),
        ("proj", 1, batch * t, d, d, L),
        ("fc1", 1, batch * t, d, shape.mlp_hidden, L),
        ("fc2", 1, batch * t, shape.mlp_hidden, d, L),
    ]
