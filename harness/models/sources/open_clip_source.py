"""`open_clip:ARCH,weights=FILE`: an open_clip image tower from a local file, its adapter beside it
(open_clip_adapter.py)."""
from __future__ import annotations

import difflib
from pathlib import Path
from typing import Any

import torch

from harness.errors import CheckpointError, ConfigError
from harness.models.feature_backbone import InputNorm
from harness.models.handle import ModelHandle
from harness.registry import register_model_source
from harness.models.sources.common import (BuildContext, ModelSpec, NORM_OPTIONS, Options, adapted_handle,
                                           existing_file, load_strict, one_line, read_state, require_target,
                                           stated_norm, weights_meta)


OPEN_CLIP_OPTIONS = ("weights", "seed", *NORM_OPTIONS)


@register_model_source("open_clip")
def open_clip_source(spec: ModelSpec, ctx: BuildContext) -> ModelHandle:
    """``open_clip:ARCH,weights=FILE``: the image tower of an open_clip model (an architecture
    name of open_clip.list_models(), or a local model-config .json), its weights from a local
    file (a whole CLIP state dict, or the tower's own with ``visual.`` keys), never downloaded;
    ``weights=random`` with ``seed`` for its initialisation. Its normalisation: stated, else the
    model's own (open_clip's preprocess_cfg)."""
    from harness.models.sources.open_clip_adapter import OpenClipBackbone

    opts = Options(spec)
    target = require_target(spec, "model name")
    weights = opts.take("weights")
    seed = opts.integer("seed", 0)
    stated = stated_norm(opts)
    opts.done(OPEN_CLIP_OPTIONS)
    if weights is None:
        raise CheckpointError(f"{spec.describe()}: give weights=FILE (open_clip_pytorch_model.bin or a .safetensors; "
                              f"ssl-bench never downloads), or weights=random for a random initialisation")
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        model, name = _create_open_clip(target, spec)
    meta: dict[str, Any] = weights_meta(weights, seed)
    if weights != "random":
        path = existing_file(weights, "weights file")
        meta.update(checkpoint=str(path), weights_from="file", **_load_open_clip(model, path, name))
    visual = model.visual
    cfg = dict(getattr(visual, "preprocess_cfg", None) or {})
    own = ((InputNorm(cfg["mean"], cfg["std"]), "open_clip preprocess_cfg")
           if cfg.get("mean") is not None and cfg.get("std") is not None else (InputNorm(), "default imagenet"))
    norm, why = stated or own
    return adapted_handle(OpenClipBackbone(visual, name, norm, why), spec, f"open_clip-{name}", meta)


def _create_open_clip(target: str, spec: ModelSpec):
    """(randomly initialised open_clip model, its architecture name), built from open_clip's
    own config registry or a local config file; never a download."""
    import logging

    try:
        import open_clip
    except ImportError:
        from harness.errors import MissingDependencyError

        raise MissingDependencyError("the open_clip model source needs open_clip: "
                                     "pip install 'ssl-bench[hf]'") from None
    if target.startswith(("hf-hub:", "local-dir:")):
        raise ConfigError(f"{spec.describe()}: give an architecture name (open_clip.list_models()) or a model "
                          f"config .json and weights=FILE; ssl-bench never downloads")
    name = target
    if target.endswith(".json"):
        path = existing_file(target, "open_clip model config")
        open_clip.add_model_config(path)
        name = path.stem
    if name not in open_clip.list_models():
        close = difflib.get_close_matches(name, open_clip.list_models(), n=3)
        raise ConfigError(f"open_clip has no model {name!r}{f' (close: {close})' if close else ''}; see "
                          f"open_clip.list_models(), or give a model config .json")
    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.ERROR)  # "no pretrained weights loaded": they are loaded below, from the file
    try:
        return open_clip.create_model(name, pretrained=None), name
    except Exception as exc:  # noqa: BLE001 - a config open_clip cannot build
        raise ConfigError(f"open_clip cannot build {name!r} ({one_line(exc)})") from None
    finally:
        root.setLevel(level)


def _load_open_clip(model, path: Path, name: str) -> dict[str, Any]:
    """Load a whole CLIP state dict strictly (the text tower is then unused), or an image tower's
    own (``visual.*`` keys only) into the tower."""
    from harness.io_utils import sha256_file

    state = read_state(path)
    if state and all(k.startswith("visual.") for k in state):
        load_strict(model.visual, {k[len("visual."):]: v for k, v in state.items()}, f"{path} (open_clip:{name})")
        unused = 0
    else:
        load_strict(model, state, f"{path} (open_clip:{name})")
        unused = sum(not k.startswith("visual.") for k in state)
    return {"source_sha256": sha256_file(path), "dropped_keys": unused}
