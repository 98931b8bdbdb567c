"""Name -> class registries for methods, protocols, datasets and model sources.

Components register with a decorator next to their definition; third-party
packages register through the entry-point groups ``ssl_bench.methods``,
``ssl_bench.protocols`` and ``ssl_bench.model_sources`` (loading the entry point imports the module, whose
decorators do the registering).
"""
from __future__ import annotations

import importlib
from importlib.metadata import entry_points
from typing import Callable, Generic, TypeVar

from harness.errors import RegistryError

T = TypeVar("T")

# Modules that hold the built-in components; imported lazily so that importing
# the registry stays cheap and free of cycles.
_BUILTIN_MODULES = {
    "method": ["methods"],
    "protocol": ["benchmarks.classification.knn", "benchmarks.classification.linear_probe",
                 "benchmarks.dense_nn.protocol", "benchmarks.segmentation.seg_linear",
                 "benchmarks.segmentation.segmenter"],
    "dataset": ["harness.data"],
    "model source": ["harness.models.sources", "harness.context.pixels", "harness.context.chance",
                     "harness.running.suite"],
}
# Modules that state as data what built-in components declare about themselves (a protocol's
# headline metric and variant labels): ``DECLARATIONS = {name: {attribute: value}}``. Tables read
# them without importing the components' modules (and torch with them).
_DECLARATION_MODULES = {"protocol": ["benchmarks.declarations"]}
_ENTRY_POINT_GROUPS = {"method": "ssl_bench.methods", "protocol": "ssl_bench.protocols",
                       "model source": "ssl_bench.model_sources"}


class Registry(Generic[T]):
    def __init__(self, kind: str):
        self.kind = kind
        self._items: dict[str, T] = {}
        self._loaded = False

    def register(self, name: str) -> Callable[[T], T]:
        def decorator(obj: T) -> T:
            existing = self._items.get(name)
            if existing is not None and existing is not obj:
                raise RegistryError(
                    f"duplicate {self.kind} name {name!r}: already registered by "
                    f"{_describe(existing)}, now again by {_describe(obj)}; pick another name"
                )
            self._items[name] = obj
            if hasattr(obj, "__dict__") and not isinstance(obj, type(lambda: 0)):
                try:
                    setattr(obj, "registry_name", name)
                except (AttributeError, TypeError):
                    pass
            return obj

        return decorator

    def load_all(self) -> None:
        """Import built-in modules and third-party entry points (once)."""
        if self._loaded:
            return
        self._loaded = True
        for module in _BUILTIN_MODULES.get(self.kind, []):
            importlib.import_module(module)
        group = _ENTRY_POINT_GROUPS.get(self.kind)
        if group:
            for ep in entry_points(group=group):
                try:
                    ep.load()
                except Exception as exc:  # a broken plugin must not hide the others
                    raise RegistryError(
                        f"plugin entry point {ep.name!r} ({ep.value}) in group {group!r} "
                        f"failed to load: {exc}"
                    ) from exc

    def get(self, name: str) -> T:
        self.load_all()
        try:
            return self._items[name]
        except KeyError:
            raise RegistryError(
                f"unknown {self.kind} {name!r}; registered {self.kind}s: "
                f"{', '.join(sorted(self._items)) or '(none)'}"
            ) from None

    def declared(self, name: str, attribute: str, default=None):
        """What component ``name`` declares as ``attribute`` (a class attribute): from the
        built-in declarations when it is a built-in one (nothing imported), else from the
        registered component; ``default`` when it declares nothing or is not registered."""
        builtin = _builtin_declarations(self.kind)
        if name in builtin:
            return builtin[name].get(attribute, default)
        try:
            return getattr(self.get(name), attribute, default)
        except RegistryError:
            return default

    def names(self) -> list[str]:
        self.load_all()
        return sorted(self._items)

    def __contains__(self, name: str) -> bool:
        self.load_all()
        return name in self._items


_DECLARED: dict[str, dict[str, dict]] = {}


def _builtin_declarations(kind: str) -> dict[str, dict]:
    if kind not in _DECLARED:
        found: dict[str, dict] = {}
        for module in _DECLARATION_MODULES.get(kind, []):
            found.update(importlib.import_module(module).DECLARATIONS)
        _DECLARED[kind] = found
    return _DECLARED[kind]


def _describe(obj) -> str:
    return f"{getattr(obj, '__module__', '?')}.{getattr(obj, '__qualname__', repr(obj))}"


METHODS: Registry = Registry("method")
PROTOCOLS: Registry = Registry("protocol")
DATASETS: Registry = Registry("dataset")
MODEL_SOURCES: Registry = Registry("model source")

register_method = METHODS.register
register_protocol = PROTOCOLS.register
register_dataset = DATASETS.register
register_model_source = MODEL_SOURCES.register
