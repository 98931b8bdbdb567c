"""Stochastic depth set on a model's numbered blocks, as the fine-tuning recipes build it: block i
of n gets ``linspace(0, rate, n)[i]`` (float32 values, as BEiT's and iBOT's ``dpr``) on each of its
residual branches (timm's ``drop_path`` or ``drop_path1`` / ``drop_path2``)."""
from __future__ import annotations

import torch
from torch import nn

from harness.errors import ConfigError
from harness.training.layer_decay import layer_scheme

SLOTS = ("drop_path", "drop_path1", "drop_path2")


def set_drop_path(model: nn.Module, rate: float, setting: str = "drop_path", owner: str = "") -> int:
    """Set the rates on every block's branches (an Identity where the rate is 0); returns how many
    branches were set. ``setting`` and ``owner`` (a protocol's name): what the error text names. A model
    without numbered blocks, or with blocks that have no drop-path branch, is one ConfigError."""
    from timm.layers import DropPath

    lead = f"{owner}: " if owner else ""
    try:
        scheme = layer_scheme(model)
    except ConfigError as exc:
        found = str(exc).split("; ", 1)[-1].rsplit(". Set", 1)[0]
        raise ConfigError(f"{lead}{setting} {rate} needs numbered transformer blocks; {found}. "
                          f"Set {setting}=0") from exc
    blocks = model.get_submodule(scheme.prefix + scheme.blocks)
    rates = torch.linspace(0, rate, len(blocks), device="cpu").tolist()  # also under a meta-device build
    count = 0
    for block, r in zip(blocks, rates):
        for slot in SLOTS:
            if isinstance(getattr(block, slot, None), (nn.Identity, DropPath)):
                setattr(block, slot, DropPath(r) if r > 0 else nn.Identity())
                count += 1
    if count == 0:
        raise ConfigError(f"{lead}{setting} {rate} needs blocks with a drop-path branch (timm's drop_path1 / "
                          f"drop_path2); {type(blocks[0]).__name__} has none: set {setting}=0")
    return count
