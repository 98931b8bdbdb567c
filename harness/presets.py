"""Protocol presets as data: one file per preset, ``configs/protocols/<protocol>_<name>.yaml``.

A file names its protocol and preset and gives the preset's ``values``: the settings the
preset changes from the protocol's defaults (its Config), nothing else, so that a value
left out -- a schedule chosen by the data set, say -- still follows the data set and the
command line. ``extends: <preset>`` starts from another preset of the same protocol. A
protocol's ``PRESETS`` is read from these files (:func:`load_presets`), the one place they
are written.
"""
from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

from harness.config import CONFIG_ROOT
from harness.errors import ConfigError
from harness.yaml_io import load_yaml

PRESETS_DIR = CONFIG_ROOT / "protocols"


def load_presets(protocol: str, folder: Path = PRESETS_DIR) -> dict[str, dict[str, Any]]:
    """{preset name: values} of ``protocol``, from ``folder/<protocol>_*.yaml``. A protocol
    that reads its presets has at least one: none found is an error (a package installed
    without its configs would otherwise run every protocol on its defaults)."""
    folder = Path(folder)
    if not folder.is_dir():
        hint = ("; the configs that ship with ssl-bench are missing: reinstall it (pip install "
                "ssl-bench, or pip install -e . in a checkout)") if folder == PRESETS_DIR else ""
        raise ConfigError(f"no preset folder {folder} for the presets of protocol {protocol!r}{hint}")
    raw = {}
    for path, doc in _documents(folder):
        if doc.get("protocol") != protocol:
            continue
        name = doc.get("preset")
        if path.stem != f"{protocol}_{name}":
            raise ConfigError(f"{path}: preset {name!r} of protocol {protocol!r} must be in a file "
                              f"named {protocol}_{name}.yaml")
        if not isinstance(doc.get("values"), dict):
            raise ConfigError(f"{path}: expected a mapping 'values' (the preset's settings), "
                              f"found {type(doc.get('values')).__name__}")
        raw[name] = doc
    if not raw:
        raise ConfigError(f"no preset of protocol {protocol!r} in {folder}: expected at least one file "
                          f"{protocol}_<preset>.yaml with 'protocol: {protocol}'")
    return {name: _resolve(name, raw, protocol, ()) for name in sorted(raw)}


def presets_folder(protocol: str) -> Path:
    """Where a declared protocol's preset files are: ``presets/`` beside the module that registers it,
    else PRESETS_DIR. Found from its declaration without importing the protocol, so that one protocol
    can read another's presets as data."""
    import importlib.util

    from harness.registry import protocol_declarations  # torch-free: the declarations only

    found = protocol_declarations().get(protocol)
    spec = importlib.util.find_spec(found.module.rpartition(".")[0]) if found is not None else None
    for location in (spec.submodule_search_locations or []) if spec is not None else []:
        if (Path(location) / "presets").is_dir():
            return Path(location) / "presets"
    return PRESETS_DIR


def _resolve(name: str, raw: dict[str, dict], protocol: str, seen: tuple[str, ...]) -> dict[str, Any]:
    if name in seen:
        raise ConfigError(f"presets of {protocol!r} extend each other in a cycle: {' -> '.join(seen + (name,))}")
    if name not in raw:
        raise ConfigError(f"preset {seen[-1]!r} of {protocol!r} extends {name!r}, which has no file "
                          f"{protocol}_{name}.yaml")
    doc = raw[name]
    base = _resolve(doc["extends"], raw, protocol, seen + (name,)) if doc.get("extends") else {}
    return {**base, **doc["values"]}


def _documents(folder: Path) -> list[tuple[Path, dict]]:
    """The YAML mappings of ``folder``, read once per state of its files (every protocol reads
    the same folder; a changed, added or removed file is read again)."""
    paths = sorted(folder.glob("*.yaml"))
    state = tuple((p.name, st.st_mtime_ns, st.st_size) for p in paths for st in (p.stat(),))
    known = _READ.get(folder)
    if known is None or known[0] != state:
        known = _READ[folder] = (state, _read_documents(paths))
    return copy.deepcopy(known[1])


_READ: dict[Path, tuple[tuple, list[tuple[Path, dict]]]] = {}


def _read_documents(paths: list[Path]) -> list[tuple[Path, dict]]:
    out = []
    for path in paths:
        try:
            doc = load_yaml(path.read_text())
        except yaml.YAMLError as exc:
            raise ConfigError(f"{path} is not valid YAML: {exc}") from exc
        if isinstance(doc, dict):
            out.append((path, doc))
    return out
