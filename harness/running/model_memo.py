"""A suite model's identity, remembered, so that a rerun whose records all exist builds no model.

All a rerun needs of a model to find its records is its identity: the ``model`` block of its
records (``ModelHandle.record_info``, whose ``weights_key`` is the hash of the weights) and what
each protocol builds differently for it (``Protocol.model_settings``). Building the model to learn
them (importing timm, loading and hashing weights, seeding an initialisation) is most of such a
run's time. The memo keeps them in ``<home>/model_memo/<key>.json``, keyed by everything the built
model depends on:

- the model's spec and the device type it runs on;
- the files it reads, each with its size and modification time (the stamp a harness
  checkpoint's .json already trusts for the weights' sha256), as its source states them
  (``harness.models.sources.source_inputs``); a source that cannot state them without building
  the model (timm, transformers, torch.hub, user code, pretraining, the supervised reference, an
  official file still to import) is never remembered;
- the versions of Python, torch, timm, safetensors and numpy, and the sha256 of the project's
  source (harness/, benchmarks/, methods/): other code or libraries may build other weights.

A remembered model is a :class:`DeferredModel`. It answers the identity questions from the memo
and builds the real model at its first other use (a protocol that has to measure it), then checks
that the real model has the remembered identity: a memo that does not hold is removed and the run
stops with an error that says so, before any number is written.
"""
from __future__ import annotations

import hashlib
import json
import platform
from functools import lru_cache
from importlib import metadata
from pathlib import Path
from typing import Any, Callable

from harness.errors import SslBenchError
from harness.io_utils import atomic_write_json
from harness.paths import model_memo_dir
from harness.runtime.device import resolve_device

MEMO_FORMAT = 1
LIBRARIES = ("torch", "timm", "safetensors", "numpy")
SOURCE_PACKAGES = ("harness", "benchmarks", "methods")


class StaleMemoError(SslBenchError):
    """A remembered identity that the built model does not have."""


@lru_cache(maxsize=1)
def code_stamp() -> str:
    """sha256 over the project's Python source, file by file (path and bytes)."""
    root = Path(__file__).resolve().parents[2]
    h = hashlib.sha256()
    for package in SOURCE_PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            h.update(str(path.relative_to(root)).encode())
            h.update(path.read_bytes())
    return h.hexdigest()


def _version(name: str) -> str:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "absent"


def memo_key(spec: str, device: str, inputs: dict[str, Any]) -> str:
    """The key of a model's memo: its spec, device type, stated inputs, libraries and code."""
    blob = {"format": MEMO_FORMAT, "spec": spec, "device": device, "inputs": inputs,
            "python": platform.python_version(), "libraries": {n: _version(n) for n in LIBRARIES},
            "code": code_stamp()}
    return hashlib.sha256(json.dumps(blob, sort_keys=True, default=str).encode()).hexdigest()


def protocol_key(protocol) -> str:
    """A protocol request, as the memo's settings are keyed: its registry name and request hash."""
    return f"{protocol.registry_name}:{protocol.request_hash()}"


class ModelMemo:
    """The memo file of one (model spec, device, inputs)."""

    def __init__(self, key: str, folder: Path | None = None):
        self.path = Path(folder or model_memo_dir()) / f"{key}.json"

    def read(self) -> dict[str, Any] | None:
        """The remembered identity, or None when there is none or it cannot be read (it is then
        only built again)."""
        try:
            memo = json.loads(self.path.read_text())
        except (OSError, ValueError):
            return None
        if not isinstance(memo, dict) or memo.get("format") != MEMO_FORMAT \
                or not isinstance(memo.get("record_info"), dict) or not isinstance(memo.get("settings"), dict):
            return None
        return memo

    def write(self, model, protocols: list) -> None:
        """Remember a built model's identity and each protocol's settings for it (added to those
        remembered for other protocols). A protocol that refuses the model is left out: asking
        it again builds the model."""
        settings = dict((self.read() or {}).get("settings") or {})
        for protocol in protocols:
            try:
                settings[protocol_key(protocol)] = protocol.model_settings(model)
            except SslBenchError:
                settings.pop(protocol_key(protocol), None)
        try:
            atomic_write_json(self.path, {"format": MEMO_FORMAT, "name": model.name,
                                          "record_info": model.record_info(), "settings": settings})
        except OSError:
            pass  # an unwritable cache costs a rebuild next time, nothing else

    def forget(self) -> None:
        self.path.unlink(missing_ok=True)


class DeferredModel:
    """A model known by its memo. ``name``, ``record_info()``, ``cache_key``, ``context``,
    ``device`` and each remembered protocol's settings come from the memo; anything else builds
    the model first (once) and is the built model's."""

    def __init__(self, memo: ModelMemo, remembered: dict[str, Any], device: str,
                 build: Callable[[], Any]):
        self._memo = memo
        self._remembered = remembered
        self._device = resolve_device(device)
        self._build = build
        self._model = None
        self.name = remembered["record_info"]["name"]

    def record_info(self) -> dict[str, Any]:
        return json.loads(json.dumps(self._remembered["record_info"]))

    @property
    def cache_key(self) -> str:
        return self._remembered["record_info"]["weights_key"]

    @property
    def context(self) -> str | None:
        return self._remembered["record_info"].get("context")

    @property
    def device(self):
        return self._device if self._model is None else self._model.device

    @property
    def built(self) -> bool:
        return self._model is not None

    def known_settings(self, protocol) -> dict[str, Any] | None:
        """The protocol's remembered settings for this model, or None when not remembered."""
        return self._remembered["settings"].get(protocol_key(protocol))

    def model(self):
        """The built model, built at the first call and checked against the memo."""
        if self._model is None:
            model = self._build()
            remembered, actual = self.record_info(), json.loads(json.dumps(model.record_info()))
            if actual != remembered:
                self._memo.forget()
                differ = sorted(k for k in set(actual) | set(remembered) if actual.get(k) != remembered.get(k))
                raise StaleMemoError(
                    f"model {self.name}: the built model is not the one remembered in {self._memo.path} "
                    f"(they differ in {', '.join(differ)}); that memo is removed: run again")
            self._model = model
        return self._model

    def __getattr__(self, attr: str):
        if attr.startswith("_"):
            raise AttributeError(attr)
        return getattr(self.model(), attr)

