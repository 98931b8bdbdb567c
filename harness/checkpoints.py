"""The harness checkpoint format: ``<stem>.safetensors`` (backbone weights, timm
names) beside ``<stem>.json`` (metadata). Loading never unpickles anything.
"""
from __future__ import annotations

import datetime as _dt
import json
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file

from harness.backbone import ViTBackbone, create_backbone
from harness.errors import CheckpointError
from harness.io_utils import atomic_write, atomic_write_json, sha256_file

FORMAT = "ssl-bench/1"
REQUIRED_META = ("method", "arch", "arch_kwargs")


def _stem(path: str | Path) -> Path:
    p = Path(path)
    return p.with_suffix("") if p.suffix in (".safetensors", ".json") else p


def save_checkpoint(path: str | Path, state_dict: dict[str, torch.Tensor], meta: dict[str, Any]) -> Path:
    """Write weights + metadata; returns the .safetensors path. ``meta`` needs
    method, arch, arch_kwargs; pretrain_data, epochs, steps, config are recorded if given."""
    missing = [k for k in REQUIRED_META if k not in meta]
    if missing:
        raise CheckpointError(f"checkpoint metadata lacks {missing}")
    stem = _stem(path)
    weights = stem.with_suffix(".safetensors")
    tensors = {k: v.detach().to("cpu").contiguous() for k, v in state_dict.items()}
    atomic_write(weights, lambda p: save_file(tensors, str(p)))
    full_meta = {
        "format": FORMAT,
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "patch_size": meta["arch_kwargs"].get("patch_size"),
        **meta,
        "sha256": sha256_file(weights),
    }
    atomic_write_json(stem.with_suffix(".json"), full_meta)
    return weights


def load_checkpoint(path: str | Path) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    stem = _stem(path)
    weights, meta_path = stem.with_suffix(".safetensors"), stem.with_suffix(".json")
    if not weights.is_file():
        raise CheckpointError(
            f"checkpoint weights {weights} not found. A harness checkpoint is a .safetensors file "
            f"with a .json beside it; official .pth files are imported with `ssl-bench zoo import`."
        )
    if not meta_path.is_file():
        raise CheckpointError(f"checkpoint metadata {meta_path} not found beside {weights}")
    try:
        meta = json.loads(meta_path.read_text())
    except json.JSONDecodeError as exc:
        raise CheckpointError(f"{meta_path}: not valid JSON ({exc})") from exc
    try:
        state = load_file(str(weights))
    except Exception as exc:  # safetensors raises several types for corrupt files
        raise CheckpointError(f"{weights}: cannot be read as safetensors ({exc})") from exc
    return state, meta


def verify_sha256(path: str | Path) -> str:
    """Recompute the weights' sha256 and compare with the metadata."""
    stem = _stem(path)
    _, meta = load_checkpoint(stem)
    actual = sha256_file(stem.with_suffix(".safetensors"))
    if meta.get("sha256") and meta["sha256"] != actual:
        raise CheckpointError(f"{stem}.safetensors: sha256 {actual} != recorded {meta['sha256']} "
                              "(the file changed after it was written)")
    return actual


def state_mismatch(own: dict[str, torch.Tensor], state: dict[str, torch.Tensor]) -> str | None:
    """Missing / unexpected keys and shape mismatches of ``state`` against ``own``, or None."""
    missing = sorted(set(own) - set(state))
    unexpected = sorted(set(state) - set(own))
    shapes = [f"{k}: checkpoint {tuple(state[k].shape)} vs model {tuple(own[k].shape)}"
              for k in sorted(set(own) & set(state)) if state[k].shape != own[k].shape]
    parts = []
    if missing:
        parts.append(f"missing keys {missing[:8]}{' ...' if len(missing) > 8 else ''}")
    if unexpected:
        parts.append(f"unexpected keys {unexpected[:8]}{' ...' if len(unexpected) > 8 else ''}")
    if shapes:
        parts.append(f"shape mismatches {shapes[:4]}")
    return "; ".join(parts) or None


def load_state_into(backbone: ViTBackbone, state: dict[str, torch.Tensor], source: str) -> None:
    """Strict load with an error that names missing/unexpected keys and shape mismatches."""
    problem = state_mismatch(backbone.backbone_state_dict(), state)
    if problem:
        raise CheckpointError(
            f"{source} does not fit architecture {backbone.arch} {backbone.arch_kwargs}: {problem}")
    backbone.load_state_dict(state, strict=False)  # strictness checked above; mask_token may be absent


def load_backbone(path: str | Path, *, arch: str | None = None, **backbone_kwargs) -> tuple[ViTBackbone, dict]:
    """Build the architecture recorded in the checkpoint and load it strictly.

    ``arch`` (optional) is what the caller expects; a different recorded arch is an error.
    """
    state, meta = load_checkpoint(path)
    if arch is not None and meta["arch"] != arch:
        raise CheckpointError(
            f"{path}: checkpoint holds arch {meta['arch']!r} but {arch!r} was requested")
    backbone = create_backbone(meta["arch"], **meta["arch_kwargs"], **backbone_kwargs)
    load_state_into(backbone, state, str(path))
    return backbone, meta
