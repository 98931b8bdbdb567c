"""The model front door: a model spec, resolved by a registry of model sources.

Every way of getting a model (a suite's entry, ``ssl-bench eval --model``, ``reproduce``,
the Python API) goes through :func:`build_model`. A spec is a string or a mapping:

    zoo:synth_dino                              a shipped or imported zoo checkpoint
    checkpoint:runs/dino/backbone.safetensors   a harness checkpoint
    random_init:vit_small_patch16_224,seed=1    an architecture at its seeded initialisation
    timm:resnet50.a1_in1k,weights=r50.safetensors
                                                any timm model (weights: a local file, `cache`
                                                = timm's local cache, or `random`)
    hf:/models/dinov2-small                     a transformers vision model from a local folder
    hub:/repos/dinov2:dinov2_vits14,weights=dinov2_vits14.pth
                                                a torch.hub entry from a local repository folder
    code:my_models.py:build,features=my_models.py:feats
                                                user code returning an nn.Module

    {source: timm, target: resnet18, weights: random, seed: 0}   the same as a mapping

The string form is ``SOURCE:TARGET[,key=value...]``; values are read as YAML scalars. Sources
register with ``@register_model_source(name)`` (entry-point group ``ssl_bench.model_sources``
for plugins) and are called as ``build(spec, ctx)``. No source falls back to random weights:
a missing weights file is a CheckpointError (an ``error:`` line, exit 2).
"""
from __future__ import annotations

import dataclasses
import importlib
import importlib.util
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import torch
import yaml

from harness.errors import CheckpointError, ConfigError
from harness.models.handle import ModelHandle
from harness.registry import MODEL_SOURCES, register_model_source


@dataclass
class ModelSpec:
    source: str
    target: str = ""
    options: dict[str, Any] = field(default_factory=dict)
    name: str | None = None  # the model's name in records; default: the source's choice

    def describe(self) -> str:
        opts = "".join(f",{k}={v}" for k, v in self.options.items())
        return f"{self.source}:{self.target}{opts}"


@dataclass
class BuildContext:
    """What a source may need beyond its spec. ``data`` is a suite's resolved data (pretraining
    and the supervised reference train on it); outside a suite it is None."""
    device: str = "auto"
    progress: bool = True
    log: Callable[[str], None] = print
    data: Any = None
    zoo_dir: Path | None = None
    zoo_path: Path | None = None
    trust: bool = False


def _scalar(text: str) -> Any:
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        return text


def parse_spec(spec: str | dict | ModelSpec, name: str | None = None) -> ModelSpec:
    """A ModelSpec from its string or mapping form (see the module docstring)."""
    if isinstance(spec, ModelSpec):
        return spec if spec.name or not name else dataclasses.replace(spec, name=name)
    if isinstance(spec, dict):
        raw = dict(spec)
        source = raw.pop("source", None)
        if not isinstance(source, str) or not source:
            raise ConfigError(f"a model mapping needs `source` (one of {', '.join(MODEL_SOURCES.names())}), "
                              f"found {spec!r}")
        target = raw.pop("target", "")
        return ModelSpec(source, "" if target is None else str(target), raw, raw.pop("name", None) or name)
    if not isinstance(spec, str) or not spec.strip():
        raise ConfigError(f"a model spec is SOURCE:TARGET[,key=value...] or a mapping, found {spec!r}")
    head, sep, target_and_opts = spec.strip().partition(":")
    if not sep:
        raise ConfigError(f"model spec {spec!r} names no source: write SOURCE:TARGET (sources: "
                          f"{', '.join(MODEL_SOURCES.names())})")
    parts = target_and_opts.split(",")
    options: dict[str, Any] = {}
    for part in parts[1:]:
        key, eq, value = part.partition("=")
        if not eq or not key.strip():
            raise ConfigError(f"model spec {spec!r}: option {part!r} is not key=value")
        options[key.strip()] = _scalar(value.strip())
    return ModelSpec(head.strip(), parts[0].strip(), options, name)


def build_model(spec: str | dict | ModelSpec, ctx: BuildContext | None = None, name: str | None = None) -> ModelHandle:
    """The model a spec names, on ``ctx.device``."""
    ctx = ctx or BuildContext()
    ms = parse_spec(spec, name)
    build = MODEL_SOURCES.get(ms.source)
    model = build(ms, ctx)
    if not isinstance(model, ModelHandle):
        raise ConfigError(f"model source {ms.source!r} returned {type(model).__name__}, not a ModelHandle")
    model.meta.setdefault("spec", ms.describe())
    return model.to(ctx.device)


def source_inputs(spec: str | dict | ModelSpec, ctx: BuildContext | None = None) -> dict[str, Any] | None:
    """What the model of a spec is made of, stated without building it: the files it reads
    (path, size, modification time) and whatever else its source names; None when its source
    cannot state that, and the model must be built to be known. A source states it through an
    ``inputs`` attribute, a function of (spec, ctx) like the source itself."""
    ctx = ctx or BuildContext()
    ms = parse_spec(spec)
    inputs = getattr(MODEL_SOURCES.get(ms.source), "inputs", None)
    return None if inputs is None else inputs(ms, ctx)


def file_stamps(paths: Sequence[Path]) -> list[list]:
    """[resolved path, size, mtime in ns] of each file: the stamp a harness checkpoint's .json
    already trusts for its weights' sha256 (harness.models.checkpoints.load_checkpoint)."""
    out = []
    for p in paths:
        st = Path(p).stat()
        out.append([str(Path(p).resolve()), st.st_size, st.st_mtime_ns])
    return out


class Options:
    """A spec's options, taken one by one; whatever is left at the end is an error."""

    def __init__(self, spec: ModelSpec):
        self.spec = spec
        self.left = dict(spec.options)

    def take(self, key: str, default: Any = None) -> Any:
        return self.left.pop(key, default)

    def done(self, allowed: str) -> None:
        if self.left:
            raise ConfigError(f"model {self.spec.describe()}: unknown option(s) {sorted(self.left)}; "
                              f"{self.spec.source} takes {allowed}")


def _require_target(spec: ModelSpec, what: str) -> str:
    if not spec.target:
        raise ConfigError(f"model source {spec.source!r} needs {what}: {spec.source}:{what.upper().replace(' ', '_')}")
    return spec.target


def _existing(path: str | Path, what: str) -> Path:
    p = Path(os.path.expanduser(str(path)))
    if not p.exists():
        raise CheckpointError(f"{what} {p} not found")
    return p


# ----------------------------------------------------------------------------- harness checkpoints
@register_model_source("checkpoint")
def checkpoint_source(spec: ModelSpec, ctx: BuildContext) -> ModelHandle:
    """A harness checkpoint; ``pos_interp=timm`` resizes position embeddings as timm does."""
    opts = Options(spec)
    path = _require_target(spec, "path")
    pos_interp = opts.take("pos_interp")
    opts.done("pos_interp")
    kw = {"pos_interp": pos_interp} if pos_interp else {}
    return ModelHandle.from_checkpoint(path, name=spec.name, **kw)


def _checkpoint_inputs(spec: ModelSpec, ctx: BuildContext) -> dict[str, Any] | None:
    from harness.models.checkpoints import checkpoint_files

    return {"files": file_stamps(checkpoint_files(_require_target(spec, "path")))}


checkpoint_source.inputs = _checkpoint_inputs


@register_model_source("random_init")
def random_init_source(spec: ModelSpec, ctx: BuildContext) -> ModelHandle:
    """The harness ViT ``arch`` at its seeded initialisation; other options override the
    architecture (harness.models.backbone.ARCH_KEYS)."""
    overrides = dict(spec.options)
    seed = int(overrides.pop("seed", 0))
    return ModelHandle.random_init(spec.target or "vit_cpu_tiny", seed=seed, name=spec.name, **overrides)


random_init_source.inputs = lambda spec, ctx: {"files": []}  # the spec and the libraries make it


@register_model_source("zoo")
def zoo_source(spec: ModelSpec, ctx: BuildContext) -> ModelHandle:
    from harness.models.zoo import zoo_model
    from harness.paths import default_zoo_dir

    opts = Options(spec)
    trust = bool(opts.take("trust", ctx.trust))
    opts.done("trust")
    return zoo_model(_require_target(spec, "name"), ctx.zoo_dir or default_zoo_dir(), trust=trust,
                     zoo_path=ctx.zoo_path, display_name=spec.name)


def _zoo_inputs(spec: ModelSpec, ctx: BuildContext) -> dict[str, Any] | None:
    """An imported or shipped harness checkpoint's files; None for an official file that is
    imported on first use (building the model imports it)."""
    from harness.models.checkpoints import checkpoint_files
    from harness.models.zoo import find_checkpoint
    from harness.paths import default_zoo_dir

    found = find_checkpoint(_require_target(spec, "name"), ctx.zoo_dir or default_zoo_dir(), ctx.zoo_path)
    if found.status != "harness":
        return None
    return {"files": file_stamps(checkpoint_files(found.path))}


zoo_source.inputs = _zoo_inputs


# ----------------------------------------------------------------------------- foreign models
def _weights_meta(weights: Any, seed: int | None) -> dict[str, Any]:
    if weights == "random":
        return {"method": "random_init", "init_seed": seed, "epochs": 0, "steps": 0, "context": "random_init"}
    return {}


def _read_state(path: Path) -> dict[str, torch.Tensor]:
    """A state dict from a .safetensors file or a torch file (tensors only: no unpickling of
    code), unwrapped from the usual containers and a DDP ``module.`` prefix."""
    if path.suffix == ".safetensors":
        from safetensors.torch import load_file

        state = load_file(str(path))
    else:
        try:
            state = torch.load(path, map_location="cpu", weights_only=True)
        except Exception as exc:  # noqa: BLE001 - torch raises several types for foreign files
            raise CheckpointError(f"{path}: cannot be read as a tensors-only torch file ({exc})") from exc
    for key in ("state_dict", "model", "module"):
        if isinstance(state, dict) and isinstance(state.get(key), dict) and not isinstance(state.get(key), torch.Tensor):
            state = state[key]
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise CheckpointError(f"{path}: expected a state dict of tensors")
    if state and all(k.startswith("module.") for k in state):
        state = {k[len("module."):]: v for k, v in state.items()}
    return state


def load_strict(module: torch.nn.Module, state: dict[str, torch.Tensor], source: str,
                ignore: tuple[str, ...] = ()) -> None:
    """Load every weight of ``module`` from ``state``; a missing or unknown key is an error that
    names it (never a silent partial load). Keys under ``ignore`` prefixes (a classifier head
    the features do not use) are dropped."""
    state = {k: v for k, v in state.items() if not k.startswith(ignore)} if ignore else state
    result = module.load_state_dict(state, strict=False)
    if result.missing_keys or result.unexpected_keys:
        raise CheckpointError(f"{source} does not fit the model: missing {result.missing_keys[:8]}"
                              f"{' ...' if len(result.missing_keys) > 8 else ''}, unexpected "
                              f"{result.unexpected_keys[:8]}{' ...' if len(result.unexpected_keys) > 8 else ''}")


def _adapted_handle(backbone, spec: ModelSpec, default_name: str, meta: dict[str, Any]) -> ModelHandle:
    backbone.eval()
    return ModelHandle(spec.name or default_name, backbone, {"method": spec.source, **meta})


@register_model_source("timm")
def timm_source(spec: ModelSpec, ctx: BuildContext) -> ModelHandle:
    """Any timm model by name (a pretrained tag picks its normalisation: resnet50.a1_in1k).
    weights: a local file (timm's own loader, with the model's checkpoint filter), ``cache``
    (timm's local cache, never the network; the default) or ``random`` (with ``seed``).
    Other options go to ``timm.create_model``."""
    import timm

    from harness.models.adapters.timm_adapter import TimmBackbone

    opts = Options(spec)
    name = _require_target(spec, "model name")
    weights = opts.take("weights", "cache")
    seed = int(opts.take("seed", 0))
    kwargs = dict(opts.left)
    kwargs.setdefault("num_classes", 0)
    if not timm.is_model(name.split(".")[0]):
        raise ConfigError(f"timm has no model {name!r}; see timm.list_models()")
    meta: dict[str, Any] = _weights_meta(weights, seed)
    if weights == "random":
        with torch.random.fork_rng():
            torch.manual_seed(seed)
            model = _create_timm(timm, name, False, kwargs)
    elif weights == "cache":
        with torch.random.fork_rng():
            torch.manual_seed(seed)
            model = _create_timm(timm, name, False, kwargs)
        path = _timm_cached_file(model, name)
        meta["dropped_keys"] = _load_timm_file(model, path, name)
        meta.update(checkpoint=str(path), weights_from="timm cache")
    else:
        path = _existing(weights, "weights file")
        with torch.random.fork_rng():  # every weight is then overwritten; seeded all the same
            torch.manual_seed(seed)
            model = _create_timm(timm, name, False, kwargs)
        dropped = _load_timm_file(model, path, name)
        from harness.io_utils import sha256_file

        meta.update(checkpoint=str(path), source_sha256=sha256_file(path), weights_from="file",
                    dropped_keys=dropped)
    return _adapted_handle(TimmBackbone(model, name), spec, f"timm-{name}", meta)


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
    raise CheckpointError(f"timm:{name}: no weights in timm's local cache (looked for {', '.join(looked) or 'nothing: the tag names no release'}); "
                          f"ssl-bench never downloads: give weights=FILE, or weights=random for a random "
                          f"initialisation")


def _load_timm_file(model, path: Path, name: str) -> list[str]:
    """Load a local weights file into a timm model strictly, through the family's own
    checkpoint filter (which converts the original releases' layouts, as timm's pretrained
    loading does); the classifier head is dropped when the model is built without one.
    Returns the dropped keys."""
    state = _read_state(path)
    family = sys.modules.get(type(model).__module__)
    filter_fn = getattr(family, "checkpoint_filter_fn", None)
    if filter_fn is not None:
        try:
            state = filter_fn(state, model)
        except TypeError:
            pass  # a filter with another signature: the file is loaded as it is
    heads: tuple[str, ...] = ()
    if getattr(model, "num_classes", 0) == 0:
        classifier = model.pretrained_cfg.get("classifier") or ()
        heads = tuple(f"{c}." for c in ((classifier,) if isinstance(classifier, str) else classifier))
    dropped = sorted(k for k in state if k.startswith(heads)) if heads else []
    load_strict(model, state, f"{path} (timm:{name})", ignore=heads)
    return dropped


def _create_timm(timm, name: str, pretrained: bool, kwargs: dict):
    """timm.create_model with the input size left free where the family allows it (ViTs take
    ``dynamic_img_size``, Swin ``strict_img_size=False``)."""
    for extra in ({"dynamic_img_size": True}, {"strict_img_size": False}, {}):
        try:
            return timm.create_model(name, pretrained=pretrained, **{**extra, **kwargs})
        except TypeError as exc:
            if not any(k in str(exc) for k in extra):
                raise
    raise AssertionError("unreachable")


@register_model_source("hf")
def hf_source(spec: ModelSpec, ctx: BuildContext) -> ModelHandle:
    """A transformers vision model saved in a local folder (config.json + weights; the
    folder's preprocessor_config.json gives its normalisation). CLIP and SigLIP folders load
    as their vision tower."""
    from harness.models.adapters.hf_adapter import HFBackbone

    opts = Options(spec)
    folder = _existing(_require_target(spec, "folder"), "transformers model folder")
    opts.done("no options")
    try:
        import transformers
    except ImportError:
        from harness.errors import MissingDependencyError

        raise MissingDependencyError("the hf model source needs transformers: pip install 'ssl-bench[hf]'") from None
    if not (folder / "config.json").is_file():
        raise CheckpointError(f"{folder}: no config.json (a transformers model folder holds config.json and "
                              f"model.safetensors, as save_pretrained writes them)")
    if not any((folder / f).is_file() for f in ("model.safetensors", "pytorch_model.bin",
                                                  "model.safetensors.index.json")):
        raise CheckpointError(f"{folder}: no weights (model.safetensors or pytorch_model.bin); ssl-bench never "
                              f"downloads them and never evaluates random weights in their place")
    hf_logging = transformers.utils.logging
    hf_logging.disable_progress_bar()  # one line per model, as the other sources
    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()  # a CLIP folder's text tower is counted below, not printed as a table
    try:
        kind = getattr(transformers.AutoConfig.from_pretrained(folder, local_files_only=True), "model_type", "")
        cls = {"clip": transformers.CLIPVisionModel, "siglip": transformers.SiglipVisionModel}.get(
            kind, transformers.AutoModel)
        model, info = cls.from_pretrained(folder, local_files_only=True, output_loading_info=True)
    finally:
        hf_logging.set_verbosity(verbosity)
    # a weight the folder lacks would stay at its random initialisation: refused, never used
    missing = list(info.get("missing_keys") or []) + [str(k) for k in info.get("mismatched_keys") or []]
    if missing:
        raise CheckpointError(f"{folder}: the weights do not fit {type(model).__name__}: missing or mismatched "
                              f"{missing[:8]}{' ...' if len(missing) > 8 else ''}")
    unused = sorted(info.get("unexpected_keys") or [])
    mean = std = None
    pre = folder / "preprocessor_config.json"
    if pre.is_file():
        import json

        pcfg = json.loads(pre.read_text())
        mean, std = pcfg.get("image_mean"), pcfg.get("image_std")
    meta = {"checkpoint": str(folder), "weights_from": "folder", "dropped_keys": len(unused)}
    return _adapted_handle(HFBackbone(model, folder.name, mean, std), spec, f"hf-{folder.name}", meta)


def _load_callable(ref: str, what: str) -> Callable:
    """``package.module:function`` or ``path/to/file.py:function``."""
    mod_ref, sep, attr = ref.rpartition(":")
    if not sep or not mod_ref or not attr:
        raise ConfigError(f"{what} {ref!r}: expected module:function or file.py:function")
    if mod_ref.endswith(".py"):
        path = _existing(mod_ref, f"{what} file")
        mod_name = f"ssl_bench_user_{abs(hash(str(path.resolve())))}"
        loader_spec = importlib.util.spec_from_file_location(mod_name, path)
        module = importlib.util.module_from_spec(loader_spec)
        sys.modules[mod_name] = module
        loader_spec.loader.exec_module(module)
    else:
        try:
            module = importlib.import_module(mod_ref)
        except ImportError as exc:
            raise ConfigError(f"{what} {ref!r}: cannot import {mod_ref!r} ({exc})") from None
    fn = getattr(module, attr, None)
    if not callable(fn):
        raise ConfigError(f"{what} {ref!r}: {mod_ref} has no callable {attr!r}")
    return fn


def _adapt_user_module(module, spec: ModelSpec, opts: Options, label: str, ctx: BuildContext,
                       meta: dict, default_name: str | None = None) -> ModelHandle:
    from harness.models.adapters.generic import adapt_module

    weights = opts.take("weights")
    features_ref = opts.take("features")
    patch_size = opts.take("patch_size")
    opts.done("weights, features, patch_size, seed")
    if not isinstance(module, torch.nn.Module):
        raise ConfigError(f"{spec.describe()}: returned {type(module).__name__}, not a torch.nn.Module")
    if weights not in (None, "random"):
        path = _existing(weights, "weights file")
        load_strict(module, _read_state(path), str(path))
        from harness.io_utils import sha256_file

        meta.update(checkpoint=str(path), source_sha256=sha256_file(path), weights_from="file")
    features = _load_callable(features_ref, "feature function") if features_ref else None
    backbone = adapt_module(module, label, features=features, features_name=features_ref or "",
                            patch_size=patch_size)
    return _adapted_handle(backbone, spec, default_name or label, meta)


@register_model_source("hub")
def hub_source(spec: ModelSpec, ctx: BuildContext) -> ModelHandle:
    """``hub:REPO_DIR:ENTRY``: a torch.hub entry of a repository folder on this machine
    (``source='local'``: nothing is fetched). weights: a file loaded strictly into what the
    entry returns, or ``random`` (the entry's own initialisation, seeded); every other option
    goes to the entry (e.g. pretrained=false)."""
    opts = Options(spec)
    repo, sep, entry = _require_target(spec, "repository folder").rpartition(":")
    if not sep or not repo or not entry:
        raise ConfigError(f"{spec.describe()}: expected hub:REPO_DIR:ENTRY")
    repo_dir = _existing(repo, "torch.hub repository folder")
    if not (repo_dir / "hubconf.py").is_file():
        raise ConfigError(f"{repo_dir}: no hubconf.py (a torch.hub repository folder has one)")
    weights = spec.options.get("weights")
    if weights is None:
        raise CheckpointError(f"{spec.describe()}: give weights=FILE (loaded strictly), or weights=random for the "
                              f"entry's own random initialisation")
    seed = int(opts.take("seed", 0))
    kwargs = {k: v for k, v in opts.left.items() if k not in ("weights", "features", "patch_size")}
    for k in kwargs:
        opts.take(k)
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        module = torch.hub.load(str(repo_dir), entry, source="local", trust_repo=True, **kwargs)
    meta = {**_weights_meta(weights, seed), "hub_repo": str(repo_dir), "hub_entry": entry}
    return _adapt_user_module(module, spec, opts, entry, ctx, meta, default_name=f"hub-{entry}")


@register_model_source("code")
def code_source(spec: ModelSpec, ctx: BuildContext) -> ModelHandle:
    """``code:module:function`` or ``code:file.py:function``: user code that returns an
    nn.Module (called with no arguments, under ``seed``). ``features=module:function``: its
    own feature function (harness.models.adapters.generic); ``weights=FILE``: loaded strictly."""
    opts = Options(spec)
    ref = _require_target(spec, "module:function")
    fn = _load_callable(ref, "model function")
    seed = int(opts.take("seed", 0))
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        module = fn()
    meta = {"code": ref, "init_seed": seed}
    return _adapt_user_module(module, spec, opts, ref.rpartition(":")[2], ctx, meta)
