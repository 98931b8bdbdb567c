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
    open_clip:ViT-B-32,weights=open_clip_pytorch_model.bin
                                                an open_clip image tower, from a local file

    {source: timm, target: resnet18, weights: random, seed: 0}   the same as a mapping

The string form is ``SOURCE:TARGET[,key=value...]``; values are read as YAML scalars. Sources
register with ``@register_model_source(name)`` (entry-point group ``ssl_bench.model_sources``
for plugins) and are called as ``build(spec, ctx)``. No source falls back to random weights:
a missing weights file is a CheckpointError (an ``error:`` line, exit 2). Foreign sources take
``norm=imagenet|clip|inception`` or ``mean=R/G/B,std=R/G/B``; without them a model's normalisation
is what its own files state (a named timm tag, a folder's preprocessor_config.json, a family,
open_clip's config), else ImageNet's, and the record says which and why (``norm_source``).
"""
from __future__ import annotations

import dataclasses
import difflib
import importlib
import importlib.util
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import torch
import yaml

from harness.errors import CheckpointError, ConfigError, SslBenchError
from harness.models.feature_backbone import InputNorm, state_content_hash
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
    try:
        model = build(ms, ctx)
    except SslBenchError as exc:
        text = str(exc)
        if "\n" not in text:
            raise
        # a library's message quoted in ours may span lines: the error stays one line
        raise type(exc)(" ".join(text.split())) from exc
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

    def integer(self, key: str, default: int | None = None) -> int | None:
        value = self.take(key, default)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
            raise ConfigError(f"model {self.spec.describe()}: {key} must be an integer, found {value!r}")
        return value

    def refuse_near_misses(self, known: Sequence[str]) -> None:
        """An option one typo away from one of the source's own (``wieghts``) is refused here, before
        it could reach a library that takes any keyword (timm.create_model, a hub entry)."""
        for key in (k for k in self.left if k not in known):
            close = difflib.get_close_matches(key, known, n=1, cutoff=0.75)
            if close:
                raise ConfigError(f"model {self.spec.describe()}: unknown option {key!r} (did you mean "
                                  f"{close[0]!r}?); {self.spec.source} takes {', '.join(known)}")

    def done(self, allowed: str | Sequence[str]) -> None:
        if self.left:
            names = allowed if isinstance(allowed, str) else ", ".join(allowed) or "no options"
            close = {k: difflib.get_close_matches(k, [] if isinstance(allowed, str) else allowed, n=1, cutoff=0.6)
                     for k in self.left}
            hints = "".join(f" (did you mean {c[0]!r} for {k!r}?)" for k, c in close.items() if c)
            raise ConfigError(f"model {self.spec.describe()}: unknown option(s) {sorted(self.left)}{hints}; "
                              f"{self.spec.source} takes {names}")


def _require_target(spec: ModelSpec, what: str) -> str:
    if not spec.target:
        raise ConfigError(f"model source {spec.source!r} needs {what}: {spec.source}:{what.upper().replace(' ', '_')}")
    return spec.target


def _existing(path: str | Path, what: str) -> Path:
    p = Path(os.path.expanduser(str(path)))
    if not p.exists():
        raise CheckpointError(f"{what} {p} not found")
    return p


def _existing_file(path: str | Path, what: str) -> Path:
    p = _existing(path, what)
    if not p.is_file():
        raise CheckpointError(f"{what} {p} is a folder; give the weights file in it (.safetensors, .pth, .pt)")
    return p


def _one_line(exc: BaseException, limit: int = 300) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text[:limit]}{' ...' if len(text) > limit else ''}"


# ----------------------------------------------------------------------------- normalisation
NORM_OPTIONS = ("norm", "mean", "std")


def _triple(value: Any, key: str, spec: ModelSpec) -> tuple[float, ...]:
    """Three numbers R/G/B: a list in a mapping spec, ``0.5/0.5/0.5`` in a string spec (a comma
    would end the option)."""
    parts = value if isinstance(value, (list, tuple)) else str(value).split("/")
    try:
        numbers = tuple(float(v) for v in parts)
    except (TypeError, ValueError):
        numbers = ()
    if len(numbers) != 3:
        raise ConfigError(f"model {spec.describe()}: {key} needs three numbers R/G/B (e.g. {key}=0.5/0.5/0.5), "
                          f"found {value!r}")
    return numbers


def stated_norm(opts: Options) -> tuple[InputNorm, str] | None:
    """The normalisation a spec states (``norm=NAME``, or ``mean=R/G/B,std=R/G/B``), or None."""
    from harness.models.feature_backbone import NAMED_NORMS

    spec = opts.spec
    norm, mean, std = (opts.take(k) for k in NORM_OPTIONS)
    if norm is not None and (mean is not None or std is not None):
        raise ConfigError(f"model {spec.describe()}: give norm=NAME or mean=R/G/B,std=R/G/B, not both")
    if norm is not None:
        if norm not in NAMED_NORMS:
            raise ConfigError(f"model {spec.describe()}: norm must be one of {', '.join(NAMED_NORMS)} (or give "
                              f"mean=R/G/B,std=R/G/B), found {norm!r}")
        return InputNorm(*NAMED_NORMS[norm]), "stated"
    if mean is None and std is None:
        return None
    if mean is None or std is None:
        raise ConfigError(f"model {spec.describe()}: give both mean=R/G/B and std=R/G/B, found only "
                          f"{'mean' if mean is not None else 'std'}")
    return InputNorm(_triple(mean, "mean", spec), _triple(std, "std", spec)), "stated"


# ----------------------------------------------------------------------------- harness checkpoints
@register_model_source("checkpoint")
def checkpoint_source(spec: ModelSpec, ctx: BuildContext) -> ModelHandle:
    """A harness checkpoint; ``pos_interp=timm`` resizes position embeddings as timm does."""
    opts = Options(spec)
    path = _require_target(spec, "path")
    pos_interp = opts.take("pos_interp")
    opts.done(("pos_interp",))
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
    opts.done(("trust",))
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

        try:
            state = load_file(str(path))
        except Exception as exc:  # noqa: BLE001 - safetensors' own error types (a truncated file, a header)
            raise CheckpointError(f"{path}: cannot be read as a .safetensors file ({_one_line(exc)}); is the "
                                  f"file complete? download or save it again") from None
    else:
        try:
            state = torch.load(path, map_location="cpu", weights_only=True)
        except Exception as exc:  # noqa: BLE001 - torch raises several types for foreign files
            raise CheckpointError(f"{path}: cannot be read as a tensors-only torch file ({_one_line(exc, 160)}); "
                                  f"save the state dict (torch.save(model.state_dict())) or a .safetensors") from None
    for key in ("state_dict", "model", "module"):
        if isinstance(state, dict) and isinstance(state.get(key), dict):
            state = state[key]
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise CheckpointError(f"{path}: expected a state dict of tensors, found {type(state).__name__}"
                              f"{' holding other objects' if isinstance(state, dict) else ''}")
    if state and all(k.startswith("module.") for k in state):
        state = {k[len("module."):]: v for k, v in state.items()}
    return state


def _listed(keys: list[str], n: int = 4) -> str:
    return f"{keys[:n]}{f' and {len(keys) - n} more' if len(keys) > n else ''}"


def load_strict(module: torch.nn.Module, state: dict[str, torch.Tensor], source: str,
                ignore: tuple[str, ...] = ()) -> None:
    """Load every weight of ``module`` from ``state``; a missing, unknown or differently shaped
    key is one error that names them (never a silent partial load, never torch's report of
    every mismatch). Keys under ``ignore`` prefixes (a classifier head the features do not use)
    are dropped."""
    state = {k: v for k, v in state.items() if not k.startswith(ignore)} if ignore else state
    own = module.state_dict()
    shapes = [f"{k} {tuple(v.shape)} vs {tuple(own[k].shape)}" for k, v in state.items()
              if k in own and tuple(v.shape) != tuple(own[k].shape)]
    missing = [k for k in own if k not in state]
    unexpected = [k for k in state if k not in own]
    if shapes or missing or unexpected:
        found = "; ".join(x for x in (f"{len(shapes)} of other shapes (file vs model): {_listed(shapes, 2)}"
                                      if shapes else "", f"missing {_listed(missing)}" if missing else "",
                                      f"unexpected {_listed(unexpected)}" if unexpected else "") if x)
        raise CheckpointError(f"{source} does not fit {type(module).__name__}: {found}; give the weights of this "
                              f"architecture (a file of another one fails so)")
    module.load_state_dict(state, strict=True)


def _adapted_handle(backbone, spec: ModelSpec, default_name: str, meta: dict[str, Any]) -> ModelHandle:
    # the identity of the weights as loaded, before anything runs (sources whose adapter measures
    # the model compute it earlier and pass it in)
    meta.setdefault("_weights_hash", state_content_hash(backbone.weights_state()))
    backbone.eval()
    return ModelHandle(spec.name or default_name, backbone, {"method": spec.source, **meta})


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

    from harness.models.adapters.timm_adapter import TimmBackbone

    opts = Options(spec)
    name = _require_target(spec, "model name")
    weights = opts.take("weights", "cache")
    seed = opts.integer("seed", 0)
    stated = stated_norm(opts)
    opts.refuse_near_misses(TIMM_OPTIONS)
    kwargs = {"num_classes": 0, **opts.left}
    if not timm.is_model(name.split(".")[0]):
        raise ConfigError(f"timm has no model {name!r}; see timm.list_models()")
    meta: dict[str, Any] = _weights_meta(weights, seed)
    path = None if weights in ("random", "cache") else _existing_file(weights, "weights file")
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
    return _adapted_handle(TimmBackbone(model, name, norm, why), spec, f"timm-{name}", meta)


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
    state = _read_state(path)
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
                          f"{kwargs} ({_one_line(failure)})") from None
    raise AssertionError("unreachable")


# normalisations of model families whose folders may come without a preprocessor_config.json
# (CLIP: OpenAI's mean/std; SigLIP: 0.5/0.5, as its image processor states)
HF_FAMILY_NORMS = {"clip": "clip", "clip_vision_model": "clip", "siglip": "inception",
                   "siglip_vision_model": "inception"}


@register_model_source("hf")
def hf_source(spec: ModelSpec, ctx: BuildContext) -> ModelHandle:
    """A transformers vision model saved in a local folder (config.json + weights). Its
    normalisation: the one stated (``norm=``, ``mean=``/``std=``), else the folder's
    preprocessor_config.json, else its family's (CLIP, SigLIP), else ImageNet's; the record says
    which. CLIP and SigLIP folders load as their vision tower."""
    from harness.models.adapters.hf_adapter import HFBackbone

    opts = Options(spec)
    folder = _existing(_require_target(spec, "folder"), "transformers model folder")
    stated = stated_norm(opts)
    opts.done(NORM_OPTIONS)
    try:
        import transformers
    except ImportError:
        from harness.errors import MissingDependencyError

        raise MissingDependencyError("the hf model source needs transformers: pip install 'ssl-bench[hf]'") from None
    if not folder.is_dir() or not (folder / "config.json").is_file():
        raise CheckpointError(f"{folder}: no config.json (a transformers model folder holds config.json and "
                              f"model.safetensors, as save_pretrained writes them)")
    if not any((folder / f).is_file() for f in ("model.safetensors", "pytorch_model.bin",
                                                  "model.safetensors.index.json")):
        raise CheckpointError(f"{folder}: no weights (model.safetensors or pytorch_model.bin); ssl-bench never "
                              f"downloads them and never evaluates random weights in their place")
    kind, model, info = _hf_load(transformers, folder)
    # a weight the folder lacks would stay at its random initialisation: refused, never used
    missing = list(info.get("missing_keys") or []) + [str(k) for k in info.get("mismatched_keys") or []]
    if missing:
        raise CheckpointError(f"{folder}: the weights do not fit {type(model).__name__}: missing or mismatched "
                              f"{_listed(missing, 8)}; save the folder again with save_pretrained")
    unused = sorted(info.get("unexpected_keys") or [])
    norm, why = stated or _folder_norm(folder, kind)
    meta = {"checkpoint": str(folder), "weights_from": "folder", "dropped_keys": len(unused)}
    return _adapted_handle(HFBackbone(model, folder.name, norm, why), spec, f"hf-{folder.name}", meta)


def _hf_load(transformers, folder: Path):
    """(model_type, model, loading info) of a folder, quietly; a folder transformers cannot read
    is one error line."""
    hf_logging = transformers.utils.logging
    hf_logging.disable_progress_bar()  # one line per model, as the other sources
    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()  # a CLIP folder's text tower is counted, not printed as a table
    try:
        kind = getattr(transformers.AutoConfig.from_pretrained(folder, local_files_only=True), "model_type", "")
        cls = {"clip": transformers.CLIPVisionModel, "siglip": transformers.SiglipVisionModel}.get(
            kind, transformers.AutoModel)
        model, info = cls.from_pretrained(folder, local_files_only=True, output_loading_info=True)
    except Exception as exc:  # noqa: BLE001 - transformers raises OSError, ValueError, KeyError, ... for a bad folder
        raise CheckpointError(f"{folder}: transformers cannot load this folder ({_one_line(exc, 200)}); "
                              f"save it again with save_pretrained") from None
    finally:
        hf_logging.set_verbosity(verbosity)
    return kind, model, info


def _folder_norm(folder: Path, kind: str) -> tuple[InputNorm, str]:
    from harness.models.feature_backbone import NAMED_NORMS

    pre = folder / "preprocessor_config.json"
    if pre.is_file():
        import json

        try:
            pcfg = json.loads(pre.read_text())
        except (OSError, ValueError) as exc:
            raise CheckpointError(f"{pre}: not readable JSON ({_one_line(exc)}); fix or remove it") from None
        if pcfg.get("image_mean") is not None and pcfg.get("image_std") is not None:
            return InputNorm(pcfg["image_mean"], pcfg["image_std"]), "folder preprocessor_config.json"
    if kind in HF_FAMILY_NORMS:
        return InputNorm(*NAMED_NORMS[HF_FAMILY_NORMS[kind]]), f"family {kind.removesuffix('_vision_model')}"
    return InputNorm(), "default imagenet"


def _import_file(path: Path, what: str):
    mod_name = f"ssl_bench_user_{abs(hash(str(path.resolve())))}"
    loader_spec = importlib.util.spec_from_file_location(mod_name, path)
    if loader_spec is None or loader_spec.loader is None:
        raise ConfigError(f"{what} file {path}: not a Python file (give file.py:function)")
    module = importlib.util.module_from_spec(loader_spec)
    sys.modules[mod_name] = module
    try:
        loader_spec.loader.exec_module(module)
    except Exception as exc:  # noqa: BLE001 - the user's file: one line that says where it failed
        from harness.models.adapters.generic import user_failure

        sys.modules.pop(mod_name, None)
        raise ConfigError(f"{what} file {path} cannot be imported: {user_failure(exc)}") from None
    return module


def _load_callable(ref: str, what: str) -> Callable:
    """``package.module:function`` or ``path/to/file.py:function``."""
    mod_ref, sep, attr = str(ref).rpartition(":")
    if not sep or not mod_ref or not attr:
        raise ConfigError(f"{what} {ref!r}: expected module:function or file.py:function")
    if mod_ref.endswith(".py"):
        module = _import_file(_existing_file(mod_ref, f"{what} file"), what)
    else:
        try:
            module = importlib.import_module(mod_ref)
        except Exception as exc:  # noqa: BLE001 - ImportError, or the module failing as it is imported
            raise ConfigError(f"{what} {ref!r}: cannot import {mod_ref!r} ({_one_line(exc)})") from None
    fn = getattr(module, attr, None)
    if not callable(fn):
        names = sorted(n for n, v in vars(module).items() if callable(v) and not n.startswith("_")
                       and getattr(v, "__module__", None) == module.__name__)
        raise ConfigError(f"{what} {ref!r}: {mod_ref} has no callable {attr!r}; it defines "
                          f"{', '.join(names) or 'none'}")
    return fn


def _call_user(fn: Callable, what: str, **kwargs) -> Any:
    """A user's function (a model builder, a hub entry), its failure one line."""
    from harness.models.adapters.generic import user_failure

    try:
        return fn(**kwargs)
    except SslBenchError:
        raise
    except Exception as exc:  # noqa: BLE001 - the user's code
        refused = [k for k in kwargs if isinstance(exc, TypeError) and f"'{k}'" in str(exc)]
        if refused:
            raise ConfigError(f"{what} takes no option {refused[0]!r} (options other than "
                              f"{', '.join(USER_OPTIONS)} go to it); remove it or fix its spelling") from None
        raise ConfigError(f"{what} failed: {user_failure(exc)}") from None


USER_OPTIONS = ("weights", "seed", "features", "patch_size", *NORM_OPTIONS)


def _adapt_user_module(module, spec: ModelSpec, opts: Options, label: str, ctx: BuildContext,
                       meta: dict, default_name: str | None = None) -> ModelHandle:
    from harness.models.adapters.generic import adapt_module

    weights = opts.take("weights")
    features_ref = opts.take("features")
    patch_size = opts.integer("patch_size")
    stated = stated_norm(opts)
    opts.done(USER_OPTIONS)
    if not isinstance(module, torch.nn.Module):
        raise ConfigError(f"{spec.describe()}: returned {type(module).__name__}, not a torch.nn.Module")
    if weights not in (None, "random"):
        path = _existing_file(weights, "weights file")
        load_strict(module, _read_state(path), str(path))
        from harness.io_utils import sha256_file

        meta.update(checkpoint=str(path), source_sha256=sha256_file(path), weights_from="file")
    # the identity of the weights as loaded: before a feature function's probe runs the module
    meta["_weights_hash"] = state_content_hash(module.state_dict())
    features = _load_callable(features_ref, "feature function") if features_ref else None
    norm, why = stated or (InputNorm(), "default imagenet")
    backbone = adapt_module(module, label, features=features, features_name=features_ref or "",
                            patch_size=patch_size, input_norm=norm, norm_source=why)
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
    if spec.options.get("weights") is None:
        raise CheckpointError(f"{spec.describe()}: give weights=FILE (loaded strictly), or weights=random for the "
                              f"entry's own random initialisation")
    seed = opts.integer("seed", 0)
    opts.refuse_near_misses(USER_OPTIONS)
    kwargs = {k: opts.take(k) for k in list(opts.left) if k not in USER_OPTIONS}
    fn = _hub_entry(repo_dir, entry)
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        module = _call_user(fn, f"hub entry {entry} of {repo_dir}", **kwargs)
    meta = {**_weights_meta(spec.options["weights"], seed), "hub_repo": str(repo_dir), "hub_entry": entry}
    return _adapt_user_module(module, spec, opts, entry, ctx, meta, default_name=f"hub-{entry}")


def _hub_entry(repo_dir: Path, entry: str) -> Callable:
    """The entry of a local torch.hub repository, loaded by torch.hub itself (``source='local'``,
    nothing fetched); an unknown entry is one line that names the ones there are."""
    def load(**kwargs):
        try:
            return torch.hub.load(str(repo_dir), entry, source="local", trust_repo=True, **kwargs)
        except RuntimeError as exc:
            if f"Cannot find callable {entry} in hubconf" not in str(exc):
                raise
        raise ConfigError(f"{repo_dir}/hubconf.py has no entry {entry!r}; its entries: "
                          f"{', '.join(_hub_names(repo_dir / 'hubconf.py')) or 'none'}")

    return load


def _hub_names(hubconf: Path) -> list[str]:
    """The public names a hubconf.py defines or imports, read without running it."""
    import ast

    names = set()
    for node in ast.parse(hubconf.read_text()).body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
    return sorted(n for n in names if not n.startswith("_") and n not in ("dependencies", "torch"))


@register_model_source("code")
def code_source(spec: ModelSpec, ctx: BuildContext) -> ModelHandle:
    """``code:module:function`` or ``code:file.py:function``: user code that returns an
    nn.Module (called with no arguments, under ``seed``). ``features=module:function``: its
    own feature function (harness.models.adapters.generic); ``weights=FILE``: loaded strictly."""
    opts = Options(spec)
    ref = _require_target(spec, "module:function")
    seed = opts.integer("seed", 0)
    opts.refuse_near_misses(USER_OPTIONS)
    fn = _load_callable(ref, "model function")
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        module = _call_user(fn, f"model function {ref}")
    meta = {"code": ref, "init_seed": seed}
    return _adapt_user_module(module, spec, opts, ref.rpartition(":")[2], ctx, meta)


OPEN_CLIP_OPTIONS = ("weights", "seed", *NORM_OPTIONS)


@register_model_source("open_clip")
def open_clip_source(spec: ModelSpec, ctx: BuildContext) -> ModelHandle:
    """``open_clip:ARCH,weights=FILE``: the image tower of an open_clip model (an architecture
    name of open_clip.list_models(), or a local model-config .json), its weights from a local
    file (a whole CLIP state dict, or the tower's own with ``visual.`` keys), never downloaded;
    ``weights=random`` with ``seed`` for its initialisation. Its normalisation: stated, else the
    model's own (open_clip's preprocess_cfg)."""
    from harness.models.adapters.open_clip_adapter import OpenClipBackbone

    opts = Options(spec)
    target = _require_target(spec, "model name")
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
    meta: dict[str, Any] = _weights_meta(weights, seed)
    if weights != "random":
        path = _existing_file(weights, "weights file")
        meta.update(checkpoint=str(path), weights_from="file", **_load_open_clip(model, path, name))
    visual = model.visual
    cfg = dict(getattr(visual, "preprocess_cfg", None) or {})
    own = ((InputNorm(cfg["mean"], cfg["std"]), "open_clip preprocess_cfg")
           if cfg.get("mean") is not None and cfg.get("std") is not None else (InputNorm(), "default imagenet"))
    norm, why = stated or own
    return _adapted_handle(OpenClipBackbone(visual, name, norm, why), spec, f"open_clip-{name}", meta)


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
        path = _existing_file(target, "open_clip model config")
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
        raise ConfigError(f"open_clip cannot build {name!r} ({_one_line(exc)})") from None
    finally:
        root.setLevel(level)


def _load_open_clip(model, path: Path, name: str) -> dict[str, Any]:
    """Load a whole CLIP state dict strictly (the text tower is then unused), or an image tower's
    own (``visual.*`` keys only) into the tower."""
    from harness.io_utils import sha256_file

    state = _read_state(path)
    if state and all(k.startswith("visual.") for k in state):
        load_strict(model.visual, {k[len("visual."):]: v for k, v in state.items()}, f"{path} (open_clip:{name})")
        unused = 0
    else:
        load_strict(model, state, f"{path} (open_clip:{name})")
        unused = sum(not k.startswith("visual.") for k in state)
    return {"source_sha256": sha256_file(path), "dropped_keys": unused}
