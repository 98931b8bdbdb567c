"""A trained linear head read from an official linear-evaluation checkpoint, instead of training one:
DINO's eval_linear.py (``state_dict`` with ``module.linear.weight`` / ``bias``, e.g. the released
``dino_deitsmall16_linearweights.pth``) or iBOT's eval_linear_multi.py (``state_dict`` with
``<h>.linear.weight`` for every head of the grid and ``best_acc_hidx``, the head combine_ckpt.py takes)."""
from __future__ import annotations

import hashlib
from pathlib import Path

import torch

from harness.errors import ConfigError, DataError


def load_head_file(path: Path, dim: int, num_classes: int) -> dict:
    """{"state": head_state-like dict (no BatchNorm), "head", "epoch", "best", "sha256"}."""
    if not path.is_file():
        raise DataError(f"head_checkpoint {path} not found; give an eval_linear(_multi).py checkpoint or leave it "
                        f"empty to train the head")
    try:
        ckpt = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001 - any unreadable file is the same one-line refusal
        raise DataError(f"head_checkpoint {path}: not a torch checkpoint of tensors ({type(exc).__name__})") from None
    sd = ckpt.get("state_dict", ckpt) if isinstance(ckpt, dict) else None
    if not isinstance(sd, dict):
        raise DataError(f"head_checkpoint {path}: expected a dict with a 'state_dict'")
    sd = {k.removeprefix("module."): v for k, v in sd.items()}
    head = None
    if "linear.weight" not in sd:
        head = ckpt.get("best_acc_hidx")
        if head is None:
            raise DataError(f"head_checkpoint {path}: neither linear.weight (eval_linear.py) nor best_acc_hidx with "
                            f"<h>.linear.weight (eval_linear_multi.py) found; keys: {sorted(sd)[:4]}")
        sd = {k.removeprefix(f"{head}."): v for k, v in sd.items() if k.startswith(f"{head}.")}
    weight, bias = sd.get("linear.weight"), sd.get("linear.bias")
    if weight is None or bias is None or tuple(weight.shape) != (num_classes, dim):
        shape = None if weight is None else tuple(weight.shape)
        raise ConfigError(f"head_checkpoint {path}: a linear layer of shape {shape}, expected ({num_classes}, {dim}) "
                          f"for {num_classes} classes on this model's {dim}-wide probe input (n_last_blocks, "
                          f"avgpool_patchtokens)")
    return {"state": {"weight": weight.float(), "bias": bias.float(), "bn": None}, "head": head,
            "epoch": ckpt.get("epoch"), "best": ckpt.get("best_acc"),
            "sha256": hashlib.sha256(path.read_bytes()).hexdigest()}
