"""What every model source shares: the spec and its parsing, the build context, options checked
by name, stated normalisations, strict weight loading, the one-line failures."""
from __future__ import annotations

import dataclasses
import difflib
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import torch
import yaml

from harness.errors import CheckpointError, ConfigError, SslBenchError
from harness.models.feature_backbone import InputNorm, state_content_hash
from harness.models.handle import ModelHandle
from harness.registry import MODEL_SOURCES


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


def require_target(spec: ModelSpec, what: str) -> str:
    if not spec.target:
        raise ConfigError(f"model source {spec.source!r} needs {what}: {spec.source}:{what.upper().replace(' ', '_')}")
    return spec.target


def existing(path: str | Path, what: str) -> Path:
    p = Path(os.path.expanduser(str(path)))
    if not p.exists():
        raise CheckpointError(f"{what} {p} not found")
    return p


def existing_file(path: str | Path, what: str) -> Path:
    p = existing(path, what)
    if not p.is_file():
        raise CheckpointError(f"{what} {p} is a folder; give the weights file in it (.safetensors, .pth, .pt)")
    return p


def one_line(exc: BaseException, limit: int = 300) -> str:
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


# ----------------------------------------------------------------------------- foreign models
def weights_meta(weights: Any, seed: int | None) -> dict[str, Any]:
    if weights == "random":
        return {"method": "random_init", "init_seed": seed, "epochs": 0, "steps": 0, "context": "random_init"}
    return {}


def read_state(path: Path) -> dict[str, torch.Tensor]:
    """A state dict from a .safetensors file or a torch file (tensors only: no unpickling of
    code), unwrapped from the usual containers and a DDP ``module.`` prefix."""
    if path.suffix == ".safetensors":
        from safetensors.torch import load_file

        try:
            state = load_file(str(path))
        except Exception as exc:  # noqa: BLE001 - safetensors' own error types (a truncated file, a header)
            raise CheckpointError(f"{path}: cannot be read as a .safetensors file ({one_line(exc)}); is the "
                                  f"file complete? download or save it again") from None
    else:
        try:
            state = torch.load(path, map_location="cpu", weights_only=True)
        except Exception as exc:  # noqa: BLE001 - torch raises several types for foreign files
            raise CheckpointError(f"{path}: cannot be read as a tensors-only torch file ({one_line(exc, 160)}); "
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


def listed(keys: list[str], n: int = 4) -> str:
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
        found = "; ".join(x for x in (f"{len(shapes)} of other shapes (file vs model): {listed(shapes, 2)}"
                                      if shapes else "", f"missing {listed(missing)}" if missing else "",
                                      f"unexpected {listed(unexpected)}" if unexpected else "") if x)
        raise CheckpointError(f"{source} does not fit {type(module).__name__}: {found}; give the weights of this "
                              f"architecture (a file of another one fails so)")
    module.load_state_dict(state, strict=True)


def adapted_handle(backbone, spec: ModelSpec, default_name: str, meta: dict[str, Any]) -> ModelHandle:
    # the identity of the weights as loaded, before anything runs (sources whose adapter measures
    # the model compute it earlier and pass it in)
    meta.setdefault("_weights_hash", state_content_hash(backbone.weights_state()))
    backbone.eval()
    return ModelHandle(spec.name or default_name, backbone, {"method": spec.source, **meta})
