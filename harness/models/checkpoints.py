"""The harness checkpoint format: ``<stem>.safetensors`` (backbone weights, timm
names) beside ``<stem>.json`` (metadata). Loading never unpickles anything.
"""
from __future__ import annotations

import datetime as _dt
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import torch
from safetensors.torch import load_file, save_file

from harness.errors import CheckpointError
from harness.io_utils import atomic_write, atomic_write_json, sha256_file

if TYPE_CHECKING:  # building a ViT imports timm: done inside the functions that build one
    from harness.models.backbone import ViTBackbone

FORMAT = "ssl-bench/1"
REQUIRED_META = ("method", "arch", "arch_kwargs")


def _stem(path: str | Path) -> Path:
    p = Path(path)
    return p.with_suffix("") if p.suffix in (".safetensors", ".json") else p


# Suffixes of other frameworks' checkpoint files; never a harness stem.
FOREIGN_SUFFIXES = (".pth", ".pt", ".ckpt", ".bin", ".pkl", ".tar", ".npz", ".h5", ".msgpack", ".onnx")


def _checkpoint_stem(path: str | Path) -> Path:
    """The stem of the checkpoint a user named: its .safetensors, its .json or the stem itself.
    Another file (an official .pth, a .ckpt) is refused: taking its stem would load whatever
    harness checkpoint lies beside it and record it under the name of the file passed."""
    p = Path(path)
    if p.suffix not in (".safetensors", ".json") and (p.is_file() or p.suffix.lower() in FOREIGN_SUFFIXES):
        found = ("found a file of another kind" if p.is_file()
                 else "found no such file (and its suffix is another format's)")
        raise CheckpointError(
            f"{p}: expected an ssl-bench checkpoint (a .safetensors file with a .json beside it, or "
            f"their common path without suffix), {found}. Convert an official file first with "
            f"`ssl-bench zoo convert FILE --out DIR/NAME` (any known layout) or `ssl-bench zoo import "
            f"NAME FILE` (a zoo model), then pass DIR/NAME.safetensors")
    return _stem(p)


def save_checkpoint(path: str | Path, state_dict: dict[str, torch.Tensor], meta: dict[str, Any]) -> Path:
    """Write weights + metadata; returns the .safetensors path. ``meta`` needs
    method, arch, arch_kwargs; pretrain_data, epochs, steps, config are recorded if given.

    The weights are renamed into place first, the .json last, and the .json records the
    weights' sha256 with their size and mtime: a pair cut between the two writes (old .json,
    new weights) fails the check in :func:`load_checkpoint` instead of loading as the old model."""
    missing = [k for k in REQUIRED_META if k not in meta]
    if missing:
        raise CheckpointError(f"checkpoint metadata lacks {missing}")
    stem = _stem(path)
    weights = stem.with_suffix(".safetensors")
    tensors = {k: v.detach().to("cpu").contiguous() for k, v in state_dict.items()}
    digest: dict[str, str] = {}

    def write(tmp: Path) -> None:
        save_file(tensors, str(tmp))
        digest["sha256"] = sha256_file(tmp)  # the bytes renamed into place, not a re-read

    atomic_write(weights, write)
    full_meta = {
        "format": FORMAT,
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "patch_size": meta["arch_kwargs"].get("patch_size"),
        **meta,
        "sha256": digest["sha256"],
        **_stat_stamp(weights),
    }
    atomic_write_json(stem.with_suffix(".json"), full_meta)
    return weights


def _stat_stamp(weights: Path) -> dict[str, int]:
    st = weights.stat()
    return {"weights_size": st.st_size, "weights_mtime_ns": st.st_mtime_ns}


def read_meta(meta_path: Path) -> dict[str, Any]:
    """The metadata of a checkpoint: a JSON object naming at least the architecture."""
    try:
        meta = json.loads(meta_path.read_text())
    except json.JSONDecodeError as exc:
        raise CheckpointError(f"{meta_path}: not valid JSON ({exc})") from exc
    if not isinstance(meta, dict):
        raise CheckpointError(
            f"{meta_path}: expected a JSON object with the checkpoint's metadata (method, arch, "
            f"arch_kwargs, sha256), found a JSON {type(meta).__name__}; re-create it with "
            f"harness.models.checkpoints.save_checkpoint or `ssl-bench zoo import`")
    arch, arch_kwargs = meta.get("arch"), meta.get("arch_kwargs", {})
    if not isinstance(arch, str) or not arch:
        raise CheckpointError(
            f"{meta_path}: the metadata names no architecture ('arch' {'missing' if arch is None else repr(arch)}); "
            f"add \"arch\" (e.g. \"vit_small_patch16_224\") and \"arch_kwargs\", or re-create the "
            f"checkpoint with harness.models.checkpoints.save_checkpoint or `ssl-bench zoo import`")
    if not isinstance(arch_kwargs, dict):
        raise CheckpointError(f"{meta_path}: 'arch_kwargs' must be a JSON object, found {arch_kwargs!r}")
    return meta


HashMismatch = Literal["error", "use_actual"]


def checkpoint_files(path: str | Path) -> tuple[Path, Path]:
    """(weights, metadata): the .safetensors and the .json of the harness checkpoint at ``path``;
    a CheckpointError naming the one that is missing."""
    stem = _checkpoint_stem(path)
    weights, meta_path = stem.with_suffix(".safetensors"), stem.with_suffix(".json")
    if not weights.is_file():
        named = f"checkpoint {path}" if Path(path) == weights else f"checkpoint {path} (weights {weights})"
        raise CheckpointError(
            f"{named} not found. A harness checkpoint is a .safetensors file with a .json beside it; "
            f"official files are converted with `ssl-bench zoo convert` or `ssl-bench zoo import`."
        )
    if not meta_path.is_file():
        raise CheckpointError(f"checkpoint metadata {meta_path} not found beside {weights}")
    return weights, meta_path


def load_checkpoint(path: str | Path, *, on_hash_mismatch: HashMismatch = "error",
                    ) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """(state dict, metadata). ``meta["sha256"]`` is the hash of the weights actually loaded:
    taken from the .json only while the file's size and mtime are the ones recorded there,
    else recomputed (the file must not change while it is read). A recomputed hash that
    differs from the recorded one (other weights put beside an old .json, or a save cut off
    between its two writes) is an error; ``on_hash_mismatch="use_actual"`` loads the weights
    under their real hash instead (the recorded one kept as ``sha256_recorded``)."""
    weights, meta_path = checkpoint_files(path)
    meta = read_meta(meta_path)
    recorded = meta.get("sha256")
    before = _stat_stamp(weights)
    trusted = bool(recorded) and before == {k: meta.get(k) for k in before}
    try:
        actual = recorded if trusted else sha256_file(weights)
        state = load_file(str(weights))
    except Exception as exc:  # safetensors raises several types for corrupt files
        raise CheckpointError(f"{weights}: cannot be read as safetensors ({exc})") from exc
    if _stat_stamp(weights) != before:
        raise CheckpointError(f"{weights} changed while it was being read; load it again once "
                              f"whatever writes it has finished")
    if recorded and actual != recorded:
        if on_hash_mismatch != "use_actual":
            raise CheckpointError(
                f"{weights}: its sha256 {actual} is not the {recorded} recorded in {meta_path.name} "
                f"beside it (other weights were put there, or a save was cut off between its two "
                f"files); put back the .json written with these weights, or delete both files and "
                f"re-run what wrote them (`ssl-bench pretrain`, `ssl-bench zoo import`, save_checkpoint)")
        meta = dict(meta, sha256_recorded=recorded)
    return state, dict(meta, sha256=actual)


def verify_sha256(path: str | Path) -> str:
    """Recompute the weights' sha256 and compare with the metadata."""
    stem = _checkpoint_stem(path)
    meta = read_meta(stem.with_suffix(".json"))
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


def load_backbone(path: str | Path, *, arch: str | None = None, on_hash_mismatch: HashMismatch = "error",
                  **backbone_kwargs) -> tuple[ViTBackbone, dict]:
    """Build the architecture recorded in the checkpoint and load it strictly.

    ``arch`` (optional) is what the caller expects; a different recorded arch is an error.
    """
    from harness.models.backbone import create_backbone

    state, meta = load_checkpoint(path, on_hash_mismatch=on_hash_mismatch)
    if arch is not None and meta["arch"] != arch:
        raise CheckpointError(
            f"{path}: checkpoint holds arch {meta['arch']!r} but {arch!r} was requested")
    if meta.get("pos_interp") is not None:  # recorded by `zoo convert --pos-interp`; a caller's choice wins
        backbone_kwargs.setdefault("pos_interp", meta["pos_interp"])
    backbone = create_backbone(meta["arch"], **meta.get("arch_kwargs", {}), **backbone_kwargs)
    load_state_into(backbone, state, str(path))
    resized = (meta.get("import_report") or {}).get("pos_embed")
    if resized and backbone.pos_embed_native is None:
        backbone.pos_resize_refused = (
            f"{path}: its position embeddings were {resized.split(' (')[0]} at import and the trained "
            f"table was not kept, so resizing them again for another input size would not give the "
            f"official model's features. Run it at img_size {backbone.patch_embed.img_size[0]}, or "
            f"import the official file again (`ssl-bench zoo import` / `zoo convert`; this version "
            f"keeps the trained table)")
    return backbone, meta
