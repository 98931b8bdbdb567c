"""`hub:REPO_DIR:ENTRY` and `code:FILE.py:FUNCTION`: a torch.hub entry or a user's function, adapted
by generic.py beside it (the model's own feature function, or its last feature map)."""
from __future__ import annotations

import importlib
import importlib.util
import sys
from pathlib import Path
from typing import Any, Callable

import torch

from harness.errors import CheckpointError, ConfigError, SslBenchError
from harness.models.feature_backbone import InputNorm, state_content_hash
from harness.models.handle import ModelHandle
from harness.registry import register_model_source
from harness.models.sources.common import (BuildContext, ModelSpec, NORM_OPTIONS, Options, adapted_handle, existing,
                                           existing_file, load_strict, one_line, read_state, require_target,
                                           stated_norm, weights_meta)


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
        from harness.models.sources.generic import user_failure

        sys.modules.pop(mod_name, None)
        raise ConfigError(f"{what} file {path} cannot be imported: {user_failure(exc)}") from None
    return module


def _load_callable(ref: str, what: str) -> Callable:
    """``package.module:function`` or ``path/to/file.py:function``."""
    mod_ref, sep, attr = str(ref).rpartition(":")
    if not sep or not mod_ref or not attr:
        raise ConfigError(f"{what} {ref!r}: expected module:function or file.py:function")
    if mod_ref.endswith(".py"):
        module = _import_file(existing_file(mod_ref, f"{what} file"), what)
    else:
        try:
            module = importlib.import_module(mod_ref)
        except Exception as exc:  # noqa: BLE001 - ImportError, or the module failing as it is imported
            raise ConfigError(f"{what} {ref!r}: cannot import {mod_ref!r} ({one_line(exc)})") from None
    fn = getattr(module, attr, None)
    if not callable(fn):
        names = sorted(n for n, v in vars(module).items() if callable(v) and not n.startswith("_")
                       and getattr(v, "__module__", None) == module.__name__)
        raise ConfigError(f"{what} {ref!r}: {mod_ref} has no callable {attr!r}; it defines "
                          f"{', '.join(names) or 'none'}")
    return fn


def _call_user(fn: Callable, what: str, **kwargs) -> Any:
    """A user's function (a model builder, a hub entry), its failure one line."""
    from harness.models.sources.generic import user_failure

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
    from harness.models.sources.generic import adapt_module

    weights = opts.take("weights")
    features_ref = opts.take("features")
    patch_size = opts.integer("patch_size")
    stated = stated_norm(opts)
    opts.done(USER_OPTIONS)
    if not isinstance(module, torch.nn.Module):
        raise ConfigError(f"{spec.describe()}: returned {type(module).__name__}, not a torch.nn.Module")
    if weights not in (None, "random"):
        path = existing_file(weights, "weights file")
        load_strict(module, read_state(path), str(path))
        from harness.io_utils import sha256_file

        meta.update(checkpoint=str(path), source_sha256=sha256_file(path), weights_from="file")
    # the identity of the weights as loaded: before a feature function's probe runs the module
    meta["_weights_hash"] = state_content_hash(module.state_dict())
    features = _load_callable(features_ref, "feature function") if features_ref else None
    norm, why = stated or (InputNorm(), "default imagenet")
    backbone = adapt_module(module, label, features=features, features_name=features_ref or "",
                            patch_size=patch_size, input_norm=norm, norm_source=why)
    return adapted_handle(backbone, spec, default_name or label, meta)


@register_model_source("hub")
def hub_source(spec: ModelSpec, ctx: BuildContext) -> ModelHandle:
    """``hub:REPO_DIR:ENTRY``: a torch.hub entry of a repository folder on this machine
    (``source='local'``: nothing is fetched). weights: a file loaded strictly into what the
    entry returns, or ``random`` (the entry's own initialisation, seeded); every other option
    goes to the entry (e.g. pretrained=false)."""
    opts = Options(spec)
    repo, sep, entry = require_target(spec, "repository folder").rpartition(":")
    if not sep or not repo or not entry:
        raise ConfigError(f"{spec.describe()}: expected hub:REPO_DIR:ENTRY")
    repo_dir = existing(repo, "torch.hub repository folder")
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
    meta = {**weights_meta(spec.options["weights"], seed), "hub_repo": str(repo_dir), "hub_entry": entry}
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
    own feature function (harness.models.sources.generic); ``weights=FILE``: loaded strictly."""
    opts = Options(spec)
    ref = require_target(spec, "module:function")
    seed = opts.integer("seed", 0)
    opts.refuse_near_misses(USER_OPTIONS)
    fn = _load_callable(ref, "model function")
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        module = _call_user(fn, f"model function {ref}")
    meta = {"code": ref, "init_seed": seed}
    return _adapt_user_module(module, spec, opts, ref.rpartition(":")[2], ctx, meta)
