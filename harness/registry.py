"""Name -> class registries for methods, protocols, datasets and model sources.

Components register with a decorator next to their definition. The core names none of them: the
packages that own components say where they are, through entry-point groups (in ssl-bench's own
``pyproject.toml`` for the built-in ones, in a plugin's for its own):

- ``ssl_bench.methods``, ``ssl_bench.protocols``, ``ssl_bench.datasets``,
  ``ssl_bench.model_sources``: a module whose import registers components (its decorators);
- ``ssl_bench.protocol_packages``: a package whose sub-folders may hold a torch-free
  ``declaration.py`` (harness.declaration); each declared protocol, and the data readers and
  per-image kinds it declares, are imported only when asked for by name.
"""
from __future__ import annotations

import importlib
import pkgutil
from importlib.metadata import entry_points
from pathlib import Path
from typing import Callable, Generic, TypeVar

from harness.declaration import ProtocolDeclaration, declaration_of_class
from harness.errors import RegistryError

T = TypeVar("T")

ENTRY_POINT_GROUPS = {"method": "ssl_bench.methods", "protocol": "ssl_bench.protocols",
                      "dataset": "ssl_bench.datasets", "model source": "ssl_bench.model_sources"}
DECLARATION_GROUP = "ssl_bench.protocol_packages"
DECLARATION_MODULE = "declaration"  # the file a protocol folder declares itself in


class Registry(Generic[T]):
    """``lazy``: a function giving name -> module for components that are known by name before
    their module is imported (declared protocols, their data readers)."""

    def __init__(self, kind: str, lazy: Callable[[], dict[str, str]] | None = None):
        self.kind = kind
        self._items: dict[str, T] = {}
        self._loaded = False
        self._lazy = lazy

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

    def _lazy_modules(self) -> dict[str, str]:
        return self._lazy() if self._lazy is not None else {}

    def load_all(self) -> None:
        """Import the modules the entry points name and every lazily known component (once)."""
        if self._loaded:
            return
        self._loaded = True
        group = ENTRY_POINT_GROUPS.get(self.kind)
        if group:
            for ep in entry_points(group=group):
                _load_entry_point(ep, group)
        for name, module in self._lazy_modules().items():
            self._import_for(name, module)

    def _import_for(self, name: str, module: str) -> None:
        try:
            importlib.import_module(module)
        except ImportError as exc:
            raise RegistryError(f"{self.kind} {name!r} is declared in module {module!r}, which does not "
                                f"import: {exc}") from exc
        if name not in self._items:
            raise RegistryError(f"{self.kind} {name!r} is declared in module {module!r}, but importing it "
                                f"registered no {self.kind} of that name")

    def get(self, name: str) -> T:
        if name in self._items:
            return self._items[name]
        module = self._lazy_modules().get(name)
        if module is not None:
            self._import_for(name, module)
            return self._items[name]
        self.load_all()
        try:
            return self._items[name]
        except KeyError:
            raise RegistryError(
                f"unknown {self.kind} {name!r}; registered {self.kind}s: "
                f"{', '.join(self.names()) or '(none)'}"
            ) from None

    def names(self) -> list[str]:
        self.load_all()
        return sorted(self._items)

    def known(self, name: str) -> bool:
        """Registered or declared, without importing anything that is not loaded yet."""
        return name in self._items or name in self._lazy_modules()

    def __contains__(self, name: str) -> bool:
        if self.known(name):
            return True
        self.load_all()
        return name in self._items


def _load_entry_point(ep, group: str):
    try:
        return ep.load()
    except Exception as exc:  # a broken plugin must not hide behind another error
        raise RegistryError(
            f"entry point {ep.name!r} ({ep.value}) in group {group!r} failed to load: {exc}"
        ) from exc


# ----------------------------------------------------------------------------- declarations
_DECLARATIONS: dict[str, ProtocolDeclaration] | None = None


def declaration_files(package) -> list[str]:
    """The ``declaration`` modules of a package's sub-folders, by module name, sorted."""
    found = []
    for info in pkgutil.iter_modules(list(package.__path__)):
        if info.ispkg and any((Path(p) / info.name / f"{DECLARATION_MODULE}.py").is_file() for p in package.__path__):
            found.append(f"{package.__name__}.{info.name}.{DECLARATION_MODULE}")
    return sorted(found)


def read_declarations(packages) -> dict[str, ProtocolDeclaration]:
    """Name -> declaration, from every ``declaration.py`` under the given packages; a name
    declared twice, or a file without a tuple of declarations, is a RegistryError."""
    found: dict[str, ProtocolDeclaration] = {}
    where: dict[str, str] = {}
    for package in packages:
        for module_name in declaration_files(package):
            module = importlib.import_module(module_name)
            items = getattr(module, "DECLARATIONS", None)
            if not isinstance(items, (tuple, list)) or not all(isinstance(d, ProtocolDeclaration) for d in items):
                raise RegistryError(f"{module_name}: DECLARATIONS must be a tuple of "
                                    "harness.declaration.ProtocolDeclaration")
            for d in items:
                if d.name in found:
                    raise RegistryError(f"protocol {d.name!r} is declared twice: in {where[d.name]} and {module_name}")
                found[d.name], where[d.name] = d, module_name
    return found


def protocol_folders() -> list[Path]:
    """The folders that declare protocols (each sub-folder of an ``ssl_bench.protocol_packages``
    package with a declaration file), sorted; found without importing them."""
    found = []
    for ep in entry_points(group=DECLARATION_GROUP):
        package = _load_entry_point(ep, DECLARATION_GROUP)
        for module_name in declaration_files(package):
            folder = module_name.split(".")[-2]
            found += [Path(p) / folder for p in package.__path__ if (Path(p) / folder).is_dir()]
    return sorted(found)


def protocol_declarations() -> dict[str, ProtocolDeclaration]:
    """Every protocol declared by the packages of the ``ssl_bench.protocol_packages`` group (read
    once; torch-free)."""
    global _DECLARATIONS
    if _DECLARATIONS is None:
        packages = [_load_entry_point(ep, DECLARATION_GROUP) for ep in entry_points(group=DECLARATION_GROUP)]
        _DECLARATIONS = read_declarations(packages)
    return _DECLARATIONS


def declaration(name: str) -> ProtocolDeclaration | None:
    """What protocol ``name`` declares: its declaration file, else (a plugin registered through
    ``ssl_bench.protocols``) what its class states; None for a protocol not registered here."""
    found = protocol_declarations().get(name)
    if found is not None:
        return found
    try:
        cls = PROTOCOLS.get(name)
    except RegistryError:
        return None
    return declaration_of_class(name, cls)


def _declared_modules(field: str) -> Callable[[], dict[str, str]]:
    def modules() -> dict[str, str]:
        out: dict[str, str] = {}
        for d in protocol_declarations().values():
            out.update({d.name: d.module} if field == "module" else getattr(d, field))
        return out

    return modules


def _describe(obj) -> str:
    return f"{getattr(obj, '__module__', '?')}.{getattr(obj, '__qualname__', repr(obj))}"


METHODS: Registry = Registry("method")
PROTOCOLS: Registry = Registry("protocol", lazy=_declared_modules("module"))
DATASETS: Registry = Registry("dataset", lazy=_declared_modules("datasets"))
MODEL_SOURCES: Registry = Registry("model source")

register_method = METHODS.register
register_protocol = PROTOCOLS.register
register_dataset = DATASETS.register
register_model_source = MODEL_SOURCES.register
