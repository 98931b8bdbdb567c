"""Any front-door model as a multi-level backbone for dense task layers (segmentation decoders, FPN detectors).

The dense recipes of iBOT (``evaluation/semantic_segmentation`` and ``object_detection``,
``mmcv_custom/register_backbone.py``), BEiT and MAE / SynCLR (mmseg 1.x ``MAE`` backbone +
``Feature2Pyramid`` neck) read four blocks of a plain ViT -- 4, 6, 8 and 12 of 12, i.e.
``out_indices (3, 5, 7, 11)`` -- and turn the single-stride patch grids into a pyramid of
strides 4, 8, 16, 32 with one fixed adapter per level:

- x4: ConvTranspose 2x2 s2 -> BatchNorm -> GELU -> ConvTranspose 2x2 s2
- x2: ConvTranspose 2x2 s2
- x1: identity
- x0.5: MaxPool 2x2 s2 (x0.25: MaxPool 4x4 s4, iBOT's patch-8 branch)

The rescales follow the patch size as in iBOT: (4, 2, 1, 0.5) for a stride-16 (or any other)
grid, (2, 1, 0.5, 0.25) for a stride-8 grid. ``out_with_norm`` applies the model's final norm
to each kept block (iBOT's ``out_with_norm``; off in its configs, on in its README's commands;
mmseg's MAE backbone has no such norm: off). The official BatchNorm is SyncBN; ``norm="bn"``
is a plain ``BatchNorm2d`` (one process: the same statistics SyncBN computes there).

Only torch is imported: the mm* registrations live in the protocols that use this module.
"""
from __future__ import annotations

from typing import Any, Literal, Sequence

import torch
from torch import nn

from harness.errors import ConfigError

# iBOT / BEiT / MAE: blocks 4, 6, 8 and 12 of a 12-block ViT
DEFAULT_OUT_INDICES = (3, 5, 7, 11)
NORMS = ("bn", "syncbn")
# the adapter of each rescale (iBOT's fpn1..fpn4, mmseg's Feature2Pyramid)
RESCALES = (4.0, 2.0, 1.0, 0.5, 0.25)


def official_rescales(patch_size: int) -> tuple[float, ...]:
    """iBOT's rescales for a patch size: stride 8 -> (2, 1, 0.5, 0.25), else (4, 2, 1, 0.5)."""
    return (2.0, 1.0, 0.5, 0.25) if int(patch_size) == 8 else (4.0, 2.0, 1.0, 0.5)


def _rescale_module(scale: float, dim: int, norm: str) -> nn.Module:
    if scale == 4:
        bn = nn.SyncBatchNorm(dim) if norm == "syncbn" else nn.BatchNorm2d(dim)
        return nn.Sequential(nn.ConvTranspose2d(dim, dim, kernel_size=2, stride=2), bn, nn.GELU(),
                             nn.ConvTranspose2d(dim, dim, kernel_size=2, stride=2))
    if scale == 2:
        return nn.Sequential(nn.ConvTranspose2d(dim, dim, kernel_size=2, stride=2))
    if scale == 1:
        return nn.Identity()
    if scale == 0.5:
        return nn.MaxPool2d(kernel_size=2, stride=2)
    return nn.MaxPool2d(kernel_size=4, stride=4)


def describe_model(backbone: nn.Module) -> str:
    """What a model offers as feature levels, for the error that refuses it."""
    arch = getattr(backbone, "arch", type(backbone).__name__)
    blocks = getattr(backbone, "num_blocks", None)
    if not hasattr(backbone, "get_features") or blocks is None:
        return f"{arch} has no feature contract (get_features / num_blocks)"
    if int(blocks) <= 1:
        return f"{arch} gives one feature level (no intermediate blocks)"
    return f"{arch} has {int(blocks)} blocks of width {getattr(backbone, 'embed_dim', '?')}"


def check_multilevel(backbone: nn.Module, out_indices: Sequence[int]) -> tuple[int, ...]:
    """The sorted, validated ``out_indices`` for this model; ConfigError saying what it has."""
    idx = tuple(int(i) for i in out_indices)
    if not idx or len(set(idx)) != len(idx) or list(idx) != sorted(idx) or min(idx) < 0:
        raise ConfigError(f"out_indices must be distinct increasing block indices >= 0, found {list(out_indices)}")
    blocks = getattr(backbone, "num_blocks", None)
    if not hasattr(backbone, "get_features") or blocks is None or int(blocks) <= max(idx):
        raise ConfigError(f"a multi-level backbone needs blocks {[i + 1 for i in idx]} (out_indices "
                          f"{list(idx)}), but {describe_model(backbone)}")
    return idx


class MultiLevelBackbone(nn.Module):
    """``forward(x)`` -> a tuple of NCHW maps, one per kept block, each through its rescale.

    ``model`` is the wrapped front-door backbone (parameter names ``model.<its names>``; the
    adapter's own are ``fpn1`` .. ``fpnN`` as iBOT names them)."""

    def __init__(self, model: nn.Module, out_indices: Sequence[int] = DEFAULT_OUT_INDICES, *,
                 out_with_norm: bool = False, rescales: Sequence[float] | None = None,
                 norm: Literal["bn", "syncbn"] = "bn"):
        super().__init__()
        self.out_indices = check_multilevel(model, out_indices)
        patch = int(getattr(model, "patch_size", 0) or 0)
        if patch < 1:
            raise ConfigError(f"a multi-level backbone needs a patch grid with a stride, but "
                              f"{describe_model(model)} states no patch_size")
        scales = tuple(float(s) for s in (rescales if rescales is not None else official_rescales(patch)))
        if len(scales) != len(self.out_indices) or any(s not in RESCALES for s in scales):
            raise ConfigError(f"rescales must be {len(self.out_indices)} values from {list(RESCALES)} "
                              f"(one per out index), found {list(scales)}")
        if norm not in NORMS:
            raise ConfigError(f"norm must be one of {NORMS}, found {norm!r}")
        self.model = model
        self.out_with_norm = bool(out_with_norm)
        self.rescales = scales
        self.norm = norm
        self.patch_size = patch
        self.embed_dim = int(model.embed_dim)
        for i, s in enumerate(scales, start=1):
            self.add_module(f"fpn{i}", _rescale_module(s, self.embed_dim, norm))

    @property
    def num_blocks(self) -> int:
        return int(self.model.num_blocks)

    @property
    def out_channels(self) -> list[int]:
        return [self.embed_dim] * len(self.out_indices)

    @property
    def out_strides(self) -> list[float]:
        """The stride of each output level in input pixels (16 / 4 = 4 for iBOT's first)."""
        return [self.patch_size / s for s in self.rescales]

    def settings(self) -> dict[str, Any]:
        """What the adapter chose (for fingerprints and records)."""
        return {"out_indices": list(self.out_indices), "out_with_norm": self.out_with_norm,
                "rescales": list(self.rescales), "norm": self.norm}

    def block_features(self, x: torch.Tensor) -> list[torch.Tensor]:
        """The kept blocks' patch grids, NCHW, before the rescales."""
        first = min(self.out_indices)
        feats = self.model.get_features(x, n_last_blocks=self.num_blocks - first, final_norm=self.out_with_norm)
        patches = feats.patches  # (B, n, h, w, d) for blocks first .. last
        return [patches[:, i - first].permute(0, 3, 1, 2).contiguous() for i in self.out_indices]

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        levels = self.block_features(x)
        return tuple(getattr(self, f"fpn{i}")(f) for i, f in enumerate(levels, start=1))
