"""YAML configs with ``_base_`` inheritance, ``--set a.b=v`` overrides and
dataclass schemas that reject unknown keys at start-up.

A config file may name one or several base files in ``_base_`` (paths relative to
the file); the file's own keys are merged on top, recursively for mappings.
Each component describes its settings with a dataclass; :func:`from_dict`
builds it and raises :class:`ConfigError` naming the key and the file for any
key the dataclass does not have, or any value of the wrong type.
"""
from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
import types
import typing
from pathlib import Path
from typing import Any, Mapping, TypeVar

import yaml

from harness.errors import ConfigError
from harness.paths import shipped
from harness.yaml_io import load_yaml

T = TypeVar("T")
# The shipped configs (methods, protocol presets, suites, paper tables, the zoo): the
# checkout's configs/, or their copy inside the installed package.
CONFIG_ROOT = shipped("configs")


# ----------------------------------------------------------------------------- loading
def resolve_config_path(path: str | Path, relative_to: Path | None = None) -> Path:
    """Find a config by path (relative to the current directory), relative to a parent
    config, or among the shipped configs (CONFIG_ROOT)."""
    p = Path(path)
    candidates = [p]
    if relative_to is not None:
        candidates.insert(0, relative_to.parent / p)
    candidates.append(CONFIG_ROOT / p)
    if p.suffix == "":
        candidates += [c.with_suffix(".yaml") for c in list(candidates)]
    for c in candidates:
        if c.is_file():
            return c.resolve()
    raise ConfigError(
        f"config file {str(path)!r} not found (looked at: {', '.join(str(c) for c in candidates)})"
    )


def load_config(path: str | Path, _seen: tuple[Path, ...] = ()) -> dict:
    """Load a YAML config, resolving ``_base_`` recursively."""
    p = resolve_config_path(path, _seen[-1] if _seen else None)
    if p in _seen:
        raise ConfigError(f"circular _base_ chain: {' -> '.join(map(str, _seen + (p,)))}")
    try:
        data = load_yaml(p.read_text()) or {}
    except yaml.YAMLError as exc:
        raise ConfigError(f"{p}: not valid YAML: {exc}") from exc
    if not isinstance(data, dict):
        raise ConfigError(f"{p}: expected a mapping at the top level, found {type(data).__name__}")
    bases = data.pop("_base_", [])
    if isinstance(bases, str):
        bases = [bases]
    merged: dict = {}
    for base in bases:
        merged = merge(merged, load_config(base, _seen + (p,)))
    merged = merge(merged, data)
    merged.setdefault("_source_", str(p))
    merged["_source_"] = str(p)
    return merged


def merge(base: Mapping, override: Mapping) -> dict:
    """Recursive dict merge; ``override`` wins. A mapping with ``_delete_: true`` replaces."""
    out = copy.deepcopy(dict(base))
    for key, value in override.items():
        if isinstance(value, Mapping) and value.get("_delete_"):
            out[key] = {k: v for k, v in value.items() if k != "_delete_"}
        elif isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


class ConfigSource(str):
    """The name of a config file that also knows which settings overrides gave (dotted key ->
    the ``key=value`` item, and where the items came from), so that an error about one of
    them blames the override, not the file."""

    overrides: dict[str, str]
    origin: str

    def __new__(cls, name: str, overrides: Mapping[str, str] | None = None, origin: str = "command line --set"):
        obj = super().__new__(cls, name)
        obj.overrides, obj.origin = dict(overrides or {}), origin
        return obj

    def __reduce__(self):
        return ConfigSource, (str(self), self.overrides, self.origin)


def blame(source: str, path: str) -> str:
    """Who gave the setting at ``path`` (dotted; list items as ``[i]``): the override that set
    it or a mapping above it, else ``source`` (the file)."""
    overrides = getattr(source, "overrides", None)
    if overrides and path:
        parts = path.split("[")[0].split(".")
        for n in range(len(parts), 0, -1):
            item = overrides.get(".".join(parts[:n]))
            if item is not None:
                return f"{source.origin} {item!r}"
    return str(source)


def _with_overrides(source: str, path: str) -> str:
    """``source``, plus the overrides given under ``path`` (a check over several settings)."""
    items = [item for key, item in getattr(source, "overrides", {}).items()
             if not path or key == path or key.startswith(path + ".")]
    return f"{source} with {source.origin} {', '.join(map(repr, items))}" if items else str(source)


def apply_overrides(cfg: dict, overrides: list[str] | None, origin: str = "command line --set") -> dict:
    """Apply ``a.b.c=value`` strings; values are parsed as YAML (1e-4, true, [1,2]).

    The ``_source_`` of a loaded file becomes a :class:`ConfigSource` that remembers the
    items and ``origin`` (where they were given, e.g. "command line --set"), so that an
    error about an overridden setting blames the override instead of the file."""
    out = copy.deepcopy(cfg)
    given: dict[str, str] = {}
    for item in overrides or []:
        if "=" not in item:
            raise ConfigError(f"override {item!r} must look like key.path=value")
        key, raw = item.split("=", 1)
        value = parse_value(raw)
        node = out
        parts = key.strip().split(".")
        for part in parts[:-1]:
            if not isinstance(node.get(part, {}), dict):
                raise ConfigError(f"override {item!r}: {part!r} is not a mapping")
            node = node.setdefault(part, {})
        node[parts[-1]] = value
        given[".".join(p.strip() for p in parts)] = item
    if given and "_source_" in out:
        src = out["_source_"]
        out["_source_"] = ConfigSource(src, {**getattr(src, "overrides", {}), **given}, origin)
    return out


def parse_value(raw: str) -> Any:
    """YAML scalar/list parsing, plus floats YAML 1.1 reads as strings ("1e-4")."""
    try:
        value = yaml.safe_load(raw)
    except yaml.YAMLError:
        return raw
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return value
    return value


# ----------------------------------------------------------------------------- schemas
def from_dict(schema: type[T], data: Mapping[str, Any] | None, source: str = "<config>",
              path: str = "") -> T:
    """Build dataclass ``schema`` from ``data``; unknown keys and bad types are errors."""
    data = dict(data or {})
    data.pop("_source_", None)
    fields = {f.name: f for f in dataclasses.fields(schema)}
    unknown = sorted(set(data) - set(fields))
    if unknown:
        where = f" under {path!r}" if path else ""
        given_by = "; ".join(dict.fromkeys(blame(source, f"{path}.{k}" if path else k) for k in unknown))
        raise ConfigError(
            f"{given_by}: unknown key(s) {', '.join(repr(k) for k in unknown)}{where} for "
            f"{schema.__name__}; allowed keys: {', '.join(sorted(fields))}"
        )
    hints = typing.get_type_hints(schema)
    kwargs = {}
    for name, value in data.items():
        kwargs[name] = _coerce(hints[name], value, source, f"{path}.{name}" if path else name)
    try:
        return schema(**kwargs)
    except TypeError as exc:
        raise ConfigError(f"{_with_overrides(source, path)}: {schema.__name__}: {exc}") from exc
    except ValueError as exc:  # raised by __post_init__ validation
        raise ConfigError(f"{_with_overrides(source, path)}: {schema.__name__}: {exc}") from exc


def _coerce(tp, value, source: str, path: str):
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if tp is Any:
        return value
    if origin in (typing.Union, types.UnionType):
        return _coerce_union(tp, args, value, source, path)
    if origin is typing.Literal:
        if value not in args:
            raise ConfigError(f"{blame(source, path)}: {path!r} must be one of {list(args)}, found {value!r}")
        return value
    if dataclasses.is_dataclass(tp):
        if isinstance(value, tp):
            return value
        if not isinstance(value, Mapping):
            raise ConfigError(f"{blame(source, path)}: {path!r} must be a mapping, found {value!r}")
        return from_dict(tp, value, source, path)
    if origin in (list, tuple):
        return _coerce_sequence(origin, args, value, source, path)
    if origin is dict or tp is dict:
        if not isinstance(value, Mapping):
            raise ConfigError(f"{blame(source, path)}: {path!r} must be a mapping, found {value!r}")
        return dict(value)
    return _coerce_scalar(tp, value, source, path)


def _coerce_union(tp, args: tuple, value, source: str, path: str):
    """``value`` as the first member of the union it fits (None as itself where allowed)."""
    if value is None and type(None) in args:
        return None
    errors = []
    for arg in args:
        if arg is type(None):
            continue
        try:
            return _coerce(arg, value, source, path)
        except ConfigError as exc:
            errors.append(exc)
    if len(errors) == 1:  # X | None: X's own message (it names the key and who gave it)
        raise errors[0]
    raise ConfigError(f"{blame(source, path)}: {path!r}: value {value!r} does not fit {tp}")


def _coerce_sequence(origin, args: tuple, value, source: str, path: str):
    """A list, a variable-length ``tuple[X, ...]`` or a fixed-length tuple, item by item."""
    if not isinstance(value, (list, tuple)):
        raise ConfigError(f"{blame(source, path)}: {path!r} must be a list, found {value!r}")
    if origin is tuple and args and args[-1] is not Ellipsis:
        if len(args) != len(value):
            raise ConfigError(f"{blame(source, path)}: {path!r} must have {len(args)} items, found {value!r}")
        return tuple(_coerce(a, v, source, f"{path}[{i}]") for i, (a, v) in enumerate(zip(args, value)))
    item_tp = args[0] if args else Any
    items = [_coerce(item_tp, v, source, f"{path}[{i}]") for i, v in enumerate(value)]
    return tuple(items) if origin is tuple else items


def _coerce_scalar(tp, value, source: str, path: str):
    """float, int, bool and str, strictly (a bool is no number); any other type as given."""
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            if isinstance(value, str):
                try:
                    return float(value)
                except ValueError:
                    pass
            raise ConfigError(f"{blame(source, path)}: {path!r} must be a number, found {value!r}")
        return float(value)
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            if isinstance(value, float) and value.is_integer():
                return int(value)
            raise ConfigError(f"{blame(source, path)}: {path!r} must be an integer, found {value!r}")
        return value
    if tp is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{blame(source, path)}: {path!r} must be true or false, found {value!r}")
        return value
    if tp is str:
        if not isinstance(value, (str, int, float)) or isinstance(value, bool):
            raise ConfigError(f"{blame(source, path)}: {path!r} must be a string, found {value!r}")
        return str(value)
    return value


def to_dict(obj) -> dict:
    """Dataclass -> plain dict (tuples become lists, for JSON/YAML)."""
    return json.loads(json.dumps(dataclasses.asdict(obj), default=str))


# ----------------------------------------------------------------------------- fingerprints
def fingerprint(settings: Mapping[str, Any] | Any, length: int = 16) -> str:
    """Stable hash of the settings that change a number (key order does not matter)."""
    if dataclasses.is_dataclass(settings):
        settings = to_dict(settings)
    blob = json.dumps(settings, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:length]
