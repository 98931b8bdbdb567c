"""`timm:NAME[,weights=FILE|cache|random]`: any timm model, its adapter beside it (timm_adapter.py)."""
from __future__ import annotations

import os
import sys
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


TIMM_OPTIONS = ("weights", "seed", *NORM_OPTIONS)


@register_model_source("timm")
def timm_source(spec: ModelSpec, ctx: BuildContext) -> ModelHandle:
    """Any timm model by name. weights: a local file (timm's own loader, with the model's
    checkpoint filter), ``cache`` (the release of the pretrained tag in timm's local cache, never
    the network; the default) or ``random`` (with ``seed``). The normalisation: the one stated
    (``norm=``, ``mean=``/``std=``), else the pretrained tag's when the target names a tag or the
    weights are the tag's release (``cache``), else ImageNet's: a user's file never gets a tag's
    preprocessing it did not ask for. Other options go to ``timm.create_model``."""
    import timm

    from harness.models.sources.timm_adapter import TimmBackbone

    opts = Options(spec)
    name = require_target(spec, "model name")
    weights = opts.take("weights", "cache")
    seed = opts.integer("seed", 0)
    stated = stated_norm(opts)
    opts.refuse_near_misses(TIMM_OPTIONS)
    kwargs = {"num_classes": 0, **opts.left}
    if not timm.is_model(name.split(".")[0]):
        raise ConfigError(f"timm has no model {name!r}; see timm.list_models()")
    meta: dict[str, Any] = weights_meta(weights, seed)
    path = None if weights in ("random", "cache") else existing_file(weights, "weights file")
    with torch.random.fork_rng():  # a loaded file overwrites every weight; seeded all the same
        torch.manual_seed(seed)
        model = _create_timm(timm, name, kwargs, spec)
    if weights == "cache":
        path = _timm_cached_file(model, name)
        meta.update(checkpoint=str(path), weights_from="timm cache")
    if path is not None:
        meta["dropped_keys"] = _load_timm_file(model, path, name)
    if path is not None and weights != "cache":
        from harness.io_utils import sha256_file

        meta.update(checkpoint=str(path), source_sha256=sha256_file(path), weights_from="file")
    norm, why = stated or _timm_norm(model, name, weights)
    return adapted_handle(TimmBackbone(model, name, norm, why), spec, f"timm-{name}", meta)


def _timm_norm(model, name: str, weights: Any) -> tuple[InputNorm, str]:
    """The pretrained tag's normalisation where the tag is the user's (named in the target, or
    its release read from the cache), else ImageNet's."""
    tag = name.partition(".")[2]
    cfg = dict(getattr(model, "pretrained_cfg", None) or {})
    if (tag or weights == "cache") and cfg.get("mean") is not None and cfg.get("std") is not None:
        return InputNorm(cfg["mean"], cfg["std"]), f"timm tag {cfg.get('tag') or tag}"
    return InputNorm(), "default imagenet"


def _timm_cached_file(model, name: str) -> Path:
    """The weights of a timm model's pretrained tag in a local cache (the Hugging Face hub
    cache, or torch.hub's checkpoints folder for URL releases), found without the network."""
    cfg = dict(getattr(model, "pretrained_cfg", None) or {})
    looked = []
    hub_id = cfg.get("hf_hub_id")
    if hub_id:
        from huggingface_hub import try_to_load_from_cache

        repo, _, revision = hub_id.partition("@")
        for filename in (cfg.get("hf_hub_filename"), "model.safetensors", "open_clip_pytorch_model.bin",
                         "pytorch_model.bin"):
            if not filename:
                continue
            found = try_to_load_from_cache(repo, filename, revision=revision or None)
            if isinstance(found, str):
                return Path(found)
            looked.append(f"hf:{repo}/{filename}")
    url = cfg.get("url")
    if url:
        candidate = Path(torch.hub.get_dir()) / "checkpoints" / os.path.basename(url)
        if candidate.is_file():
            return candidate
        looked.append(str(candidate))
    where = ", ".join(looked) or "nothing: the tag names no release"
    raise CheckpointError(f"timm:{name}: no weights in timm's local cache (looked for {where}); "
                          f"ssl-bench never downloads: give weights=FILE, or weights=random for a random "
                          f"initialisation")


def _load_timm_file(model, path: Path, name: str) -> list[str]:
    """Load a local weights file into a timm model strictly, through the family's own
    checkpoint filter (which converts the original releases' layouts, as timm's pretrained
    loading does); the classifier head is dropped when the model is built without one.
    Returns the dropped keys."""
    state = read_state(path)
    family = sys.modules.get(type(model).__module__)
    filter_fn = getattr(family, "checkpoint_filter_fn", None)
    if filter_fn is not None:
        try:
            state = filter_fn(state, model)
        except Exception:  # noqa: BLE001 - another signature, or a file of another family: the
            pass  # file is loaded as it is, and the strict load says what does not fit
    heads: tuple[str, ...] = ()
    if getattr(model, "num_classes", 0) == 0:
        classifier = model.pretrained_cfg.get("classifier") or ()
        heads = tuple(f"{c}." for c in ((classifier,) if isinstance(classifier, str) else classifier))
    dropped = sorted(k for k in state if k.startswith(heads)) if heads else []
    load_strict(model, state, f"{path} (timm:{name})", ignore=heads)
    return dropped


def _create_timm(timm, name: str, kwargs: dict, spec: ModelSpec):
    """timm.create_model with the input size left free where the family allows it (ViTs take
    ``dynamic_img_size``, Swin ``strict_img_size=False``); an option the model refuses is one
    error line that names it."""
    for extra in ({"dynamic_img_size": True}, {"strict_img_size": False}, {}):
        try:
            return timm.create_model(name, pretrained=False, **{**extra, **kwargs})
        except TypeError as exc:
            if any(k in str(exc) for k in extra):
                continue
            failure = exc
        except Exception as exc:  # noqa: BLE001 - an option's value the model refuses
            failure = exc
        refused = [k for k in kwargs if f"'{k}'" in str(failure)]
        if refused:
            raise ConfigError(f"model {spec.describe()}: unknown option {refused[0]!r}; timm takes "
                              f"{', '.join(TIMM_OPTIONS)} and the arguments of {name.split('.')[0]}'s model "
                              f"class") from None
        raise ConfigError(f"model {spec.describe()}: timm.create_model({name!r}) failed with the options "
                          f"{kwargs} ({one_line(failure)})") from None
    raise AssertionError("unreachable")
