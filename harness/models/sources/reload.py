"""New weights for an adapted model (timm, transformers, user code), written so that the model's
own front-door spec loads them again: the spec with ``weights=FILE`` (timm, code, hub), or a
transformers folder written by ``save_pretrained`` (hf). The spec states the model's input
normalisation (``mean=``/``std=``), so the reloaded model sees its images as the original did
whatever the original's normalisation came from (a timm tag, a folder's preprocessor config)."""
from __future__ import annotations

import copy
from pathlib import Path

import torch

from harness.errors import ConfigError
from harness.models.handle import ModelHandle
from harness.models.sources.common import NORM_OPTIONS, ModelSpec, parse_spec

WEIGHTS_FILE_SOURCES = ("timm", "code", "hub")


def _triple(values) -> str:
    return "/".join(repr(float(v)) for v in values)


def reloadable_spec(model: ModelHandle) -> ModelSpec:
    """``model``'s spec, where new weights can be written for it; else one ConfigError line."""
    described = model.meta.get("spec")
    spec = parse_spec(described) if described else None
    if spec is None or spec.source not in WEIGHTS_FILE_SOURCES + ("hf",):
        source = f"source {spec.source}" if spec else "built from no spec"
        raise ConfigError(f"{model.name} ({source}): new weights can be written for models of the "
                          f"{', '.join(WEIGHTS_FILE_SOURCES + ('hf',))} sources and harness ViTs only")
    return spec


def save_reloadable(model: ModelHandle, state: dict[str, torch.Tensor], folder: Path, stem: str) -> tuple[str, Path]:
    """Write ``state`` (the adapted backbone's state dict: ``model.*`` keys, every key of the
    original) for ``model``'s spec under ``folder``; returns (the spec that loads it, the
    weights file)."""
    from harness.io_utils import atomic_write

    spec = reloadable_spec(model)
    inner = copy.deepcopy(model.backbone.model)
    own = {k[len("model."):]: v for k, v in state.items() if k.startswith("model.")}
    inner.load_state_dict(own, strict=True)  # the original's keys, every one: nothing left at its init
    norm = model.backbone.input_norm
    options = {k: v for k, v in spec.options.items() if k not in ("weights", "seed", *NORM_OPTIONS)}
    options.update(mean=_triple(norm.mean), std=_triple(norm.std))
    folder.mkdir(parents=True, exist_ok=True)
    if spec.source == "hf":
        out = folder / stem
        inner.save_pretrained(out, safe_serialization=True)
        return ModelSpec("hf", str(out), options).describe(), out / "model.safetensors"
    from safetensors.torch import save_file

    weights = folder / f"{stem}.safetensors"
    tensors = {k: v.detach().cpu().contiguous() for k, v in inner.state_dict().items()}
    atomic_write(weights, lambda p: save_file(tensors, str(p)))
    options = {"weights": str(weights), **options}
    return ModelSpec(spec.source, spec.target, options).describe(), weights
