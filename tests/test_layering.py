"""The layering of the three packages: harness/ (the core), benchmarks/ (the protocols) and
methods/ (the pretraining methods).

- The core imports no method and no protocol, not even by string: the packages that own them
  say where they are (entry points in pyproject.toml, each protocol folder's declaration.py).
  benchmarks/ and methods/ import the core. Imports by string (``import_module``, a
  declaration's module paths) count as imports everywhere below.
- No import cycle among their modules, counting imports inside functions and type-only ones
  under ``if TYPE_CHECKING:``: a cycle that Python happens to resolve is still two modules
  that cannot be read, tested or moved one without the other.
- No protocol folder (``benchmarks/<folder>/``) imports another: what several protocols share lives
  in the core (harness/probes/, harness/data/, ...), so that a change inside one protocol's folder
  breaks no other.
- No module imports another module's private name (``from a import _x``, a package's
  ``__init__`` included): what crosses a module boundary is public.
- harness/'s rooms (its subpackages and top-level modules) stand on declared floors
  (``HARNESS_FLOORS``, lowest first): a room imports only rooms of its own floor or below,
  and no two rooms import each other, so the ground floor (runtime/) never reaches up into
  what runs work (running/).

An import names the module it binds: ``import a.b``: a.b; ``from a import b``: a.b where b is
a submodule, else a; relative imports are resolved against the importing module's package.
The parent packages Python runs on the way are not counted (a package's ``__init__`` that
imports its own submodules to register them is no cycle). Modules are found by walking the
folders, subpackages included, so new modules are checked without editing this file; every
check reads the imports under a root folder, and the last tests give it a synthetic tree to
show that it can fail.
"""
from __future__ import annotations

import ast
from dataclasses import dataclass, field
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
PACKAGES = ("harness", "benchmarks", "methods")
CORE = "harness"
PLUGIN_PACKAGES = ("benchmarks", "methods")


@dataclass(frozen=True)
class ImportEdge:
    """One name an import statement binds, resolved against the modules found."""

    importer: str  # the importing module
    target: str  # the module the statement binds (see the module docstring)
    source: str  # the module a `from` import reads from (`a` in `from a import b`); the target otherwise
    name: str | None  # the name a `from` import takes (`b`); None for `import a.b`
    where: str  # file:line of the statement


def find_modules(root: Path, packages=PACKAGES) -> dict[str, Path]:
    """Module name -> file, for every .py file of ``packages`` under ``root`` that sits in a
    chain of folders with an ``__init__.py`` (a subpackage's modules included)."""
    modules: dict[str, Path] = {}
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            folders = path.relative_to(root).parents
            if all((root / folder / "__init__.py").is_file() for folder in folders if folder != Path(".")):
                parts = path.relative_to(root).with_suffix("").parts
                modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return modules


def _absolute(module: str, path: Path, node: ast.ImportFrom) -> str:
    """The module a `from` import reads from, its relative dots resolved."""
    if not node.level:
        return node.module
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    base = package[:len(package) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


@dataclass(frozen=True)
class ImportGraph:
    """The modules found under a root (name -> file) and the import edges between them."""

    modules: dict[str, Path] = field(repr=False)
    edges: list[ImportEdge] = field(repr=False)


# The calls that import a module named by a string, and the keyword arguments that name a module
# to be imported later (a protocol declaration's module, data readers, per-image kinds, generator).
STRING_IMPORT_CALLS = ("import_module", "__import__")
MODULE_KEYWORDS = ("module", "synthetic", "datasets", "per_image_kinds")


def string_imports(call: ast.Call) -> list[str]:
    """The module names a call imports by string: ``import_module("a.b")``, and the literal module
    paths of the keywords of ``MODULE_KEYWORDS`` (a string, or a dict of strings)."""
    name = call.func.attr if isinstance(call.func, ast.Attribute) else getattr(call.func, "id", None)
    found = []
    if name in STRING_IMPORT_CALLS and call.args and isinstance(call.args[0], ast.Constant):
        found.append(call.args[0].value)
    for kw in call.keywords:
        if kw.arg not in MODULE_KEYWORDS:
            continue
        values = kw.value.values if isinstance(kw.value, ast.Dict) else [kw.value]
        found += [v.value for v in values if isinstance(v, ast.Constant)]
    return [f for f in found if isinstance(f, str)]


def read_imports(root: Path, packages=PACKAGES) -> ImportGraph:
    """The modules and every name bound by an import statement anywhere in them (function
    bodies and ``if TYPE_CHECKING:`` blocks included), and every module imported by string
    (``import_module``, a declaration's module paths: :func:`string_imports`)."""
    modules = find_modules(root, packages)
    edges = []
    for module, path in modules.items():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, (ast.Import, ast.ImportFrom, ast.Call)):
                where = f"{path.relative_to(root).as_posix()}:{node.lineno}"
            if isinstance(node, ast.Call):
                edges += [ImportEdge(module, target, target, None, where)
                          for target in string_imports(node) if target.split(".")[0] in packages]
            elif isinstance(node, ast.Import):
                edges += [ImportEdge(module, alias.name, alias.name, None, where) for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                source = _absolute(module, path, node)
                for alias in node.names:
                    submodule = f"{source}.{alias.name}"
                    target = submodule if submodule in modules else source
                    edges.append(ImportEdge(module, target, source, alias.name, where))
    return ImportGraph(modules, edges)


# harness/'s floors, lowest first. Each room (a subpackage, or a module at the top of harness/)
# imports only from its own floor or below; rooms of one floor may import each other one way.
HARNESS_FLOORS: tuple[tuple[str, ...], ...] = (
    ("__init__", "errors", "yaml_io"),
    ("metrics", "declaration", "examples"),  # what protocols declare about their numbers and show of their items
    ("paths", "io_utils", "config", "registry", "schedules", "presets", "protocol_info", "variants", "text_table",
     "per_image"),
    ("runtime",),  # devices and precision, collectives, memory
    ("data",),
    ("models",),
    ("features",),  # the feature contract, extraction and cache: below the protocols
    ("protocol", "method"),  # the contracts protocols and methods implement
    ("training", "openmmlab"),  # openmmlab: what the mmseg protocols share (stack, metric, checkpoints)
    ("conformance", "context"),
    ("probes",),  # what several protocols train or search on frozen features: below the protocols
    ("paper",),  # published tables and the verdict rule
    ("results",),  # records and everything made of them, paper verdicts included
    ("running", "scaffold"),  # suites, paper tables, launchers
    ("cli",),
)


def room_of(module: str, core: str = CORE) -> str:
    """``harness.models.zoo`` -> ``models``; ``harness.cli`` -> ``cli``; ``harness`` -> ``__init__``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def floor_violations(imports: ImportGraph, floors=HARNESS_FLOORS, core: str = CORE) -> list[str]:
    """Imports that run up the floors, rooms not on any floor, and pairs of rooms importing
    each other (one line each, with an import of each way)."""
    level = {room: i for i, rooms in enumerate(floors) for room in rooms}
    ties: dict[tuple[str, str], str] = {}
    lines = []
    for e in imports.edges:
        if e.importer.split(".")[0] != core or e.target.split(".")[0] != core or e.target not in imports.modules:
            continue
        a, b = room_of(e.importer), room_of(e.target)
        if a == b:
            continue
        for room in (a, b):
            if room not in level:
                lines.append(f"{room} is on no floor of HARNESS_FLOORS ({e.where})")
        if a in level and b in level and level[b] > level[a]:
            lines.append(f"{a} imports {b}, a floor above it ({e.where})")
        ties.setdefault((a, b), e.where)
    lines += [f"{a} and {b} import each other ({where}; {ties[(b, a)]})"
              for (a, b), where in ties.items() if a < b and (b, a) in ties]
    return sorted(set(lines))


PROTOCOLS_PACKAGE = "benchmarks"


def protocol_folder(module: str, protocols: str = PROTOCOLS_PACKAGE) -> str | None:
    """``benchmarks.<folder>.<module>`` -> ``<folder>``; None outside the protocols' package and for
    the package itself."""
    parts = module.split(".")
    return parts[1] if parts[0] == protocols and len(parts) > 1 else None


def sibling_protocol_imports(imports: ImportGraph, protocols: str = PROTOCOLS_PACKAGE) -> list[str]:
    """A protocol folder's imports of another protocol folder (by string too), as
    `file:line: module imports target (folder imports other)`."""
    lines = []
    for e in imports.edges:
        a, b = protocol_folder(e.importer, protocols), protocol_folder(e.target, protocols)
        if a and b and a != b:
            lines.append(f"{e.where}: {e.importer} imports {e.target} ({a} imports {b})")
    return sorted(set(lines))


def plugin_imports_of_core(imports: ImportGraph, core: str = CORE, plugins=PLUGIN_PACKAGES) -> list[str]:
    """The core's imports of a plugin package, as `module imports target (file:line)`."""
    return sorted(f"{e.importer} imports {e.target} ({e.where})" for e in imports.edges
                  if e.importer.split(".")[0] == core and e.target.split(".")[0] in plugins)


def is_private(name: str | None) -> bool:
    """A leading underscore, not a dunder (``__version__`` and the like are public)."""
    return bool(name) and name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def private_imports(imports: ImportGraph) -> list[str]:
    """`from a import _x` where a is one of the modules and not the importer itself."""
    return sorted(f"{e.importer} imports {e.name} from {e.source} ({e.where})" for e in imports.edges
                  if is_private(e.name) and e.source in imports.modules and e.source != e.importer)


def import_cycles(imports: ImportGraph) -> list[str]:
    """One line per knot of modules that import one another (a strongly connected component
    of the import graph): its shortest cycle through its first module, each step with the file
    and line of its import, then every module of the knot."""
    # importer -> imported module -> file:line of its first import
    graph: dict[str, dict[str, str]] = {m: {} for m in imports.modules}
    for e in imports.edges:
        if e.target in imports.modules and e.target != e.importer:
            graph[e.importer].setdefault(e.target, e.where)
    lines = []
    for knot in _strongly_connected(graph):
        if len(knot) < 2:
            continue
        start = min(knot)
        cycle = _shortest_cycle(graph, start, set(knot))
        steps = " -> ".join(f"{a} ({graph[a][b]})" for a, b in zip(cycle, cycle[1:]))
        lines.append(f"{steps} -> {start}; modules in this knot: {', '.join(sorted(knot))}")
    return sorted(lines)


def _strongly_connected(graph: dict[str, dict[str, str]]) -> list[list[str]]:
    """Tarjan's strongly connected components."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            components.append(component)

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return components


def _shortest_cycle(graph: dict[str, dict[str, str]], start: str, knot: set[str]) -> list[str]:
    """Breadth-first from ``start`` back to it, within the knot: [start, ..., last] where last
    imports start."""
    paths = {start: [start]}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for nxt in sorted(graph[node]):
                if nxt == start:
                    return paths[node] + [start]
                if nxt in knot and nxt not in paths:
                    paths[nxt] = paths[node] + [nxt]
                    following.append(nxt)
        frontier = following
    raise AssertionError(f"{start} is in a knot but on no cycle")


def _report(title: str, offenders: list[str]) -> str:
    return f"{title} ({len(offenders)}):\n  " + "\n  ".join(offenders)


# ---------------------------------------------------------------------------- the repository
@pytest.fixture(scope="module")
def repo() -> ImportGraph:
    return read_imports(REPO)


def test_the_packages_are_found_with_their_subpackages(repo):
    assert {"harness.protocol", "harness.running.evaluate", "harness.data.io", "methods.dino"} <= set(repo.modules)
    assert {m.split(".")[0] for m in repo.modules} == set(PACKAGES)


def test_harness_imports_no_method_or_protocol(repo):
    offenders = plugin_imports_of_core(repo)
    assert not offenders, _report("harness/ imports a method or a protocol package", offenders)


def test_no_protocol_folder_imports_another(repo):
    offenders = sibling_protocol_imports(repo)
    assert not offenders, _report("a protocol folder imports another (move what they share into harness/)",
                                  offenders)


def test_modules_import_without_cycles(repo):
    cycles = import_cycles(repo)
    assert not cycles, _report("import cycles among harness/, benchmarks/ and methods/", cycles)


def test_harness_rooms_import_only_down_their_floors(repo):
    offenders = floor_violations(repo)
    assert not offenders, _report("harness/ imports that run up HARNESS_FLOORS or tie two rooms", offenders)


def test_no_private_name_crosses_a_module_boundary(repo):
    offenders = private_imports(repo)
    assert not offenders, _report("private names imported from another module (make them public, "
                                  "or keep them where they are used)", offenders)


# ---------------------------------------------------------------------------- the checks can fail
def _tree(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def test_a_cycle_through_type_only_and_function_imports_is_reported(tmp_path):
    root = _tree(tmp_path, {
        "pkg/__init__.py": "from pkg import a  # registers, as the plugin packages do\n",
        "pkg/a.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.b import B\n",
        "pkg/b.py": "class B:\n    def f(self):\n        from . import a\n",
        "pkg/leaf.py": "import pkg.a\n",
    })
    assert import_cycles(read_imports(root, ("pkg",))) == [
        "pkg.a (pkg/a.py:3) -> pkg.b (pkg/b.py:3) -> pkg.a; modules in this knot: pkg.a, pkg.b"]


def test_a_cycle_across_subpackages_is_reported_and_registration_is_none(tmp_path):
    """`from pkg import a` names the module pkg.a, `from .. import x` the package above: the
    knot is a <-> sub.c, never the __init__ files that import their submodules."""
    root = _tree(tmp_path, {
        "pkg/__init__.py": "from pkg import a\n",
        "pkg/a.py": "from .sub.c import helper\n",
        "pkg/sub/__init__.py": "from pkg.sub import c\n",
        "pkg/sub/c.py": "def helper():\n    from .. import a\n",
        "pkg/notes/plain.py": "import pkg.a  # not a package: no __init__.py, not a module\n",
    })
    assert "pkg.notes.plain" not in find_modules(root, ("pkg",))
    [cycle] = import_cycles(read_imports(root, ("pkg",)))
    assert cycle.endswith("modules in this knot: pkg.a, pkg.sub.c")
    (root / "pkg/sub/c.py").write_text("def helper():\n    pass\n")
    assert import_cycles(read_imports(root, ("pkg",))) == []


def test_a_private_name_from_another_module_is_reported(tmp_path):
    root = _tree(tmp_path, {
        "pkg/__init__.py": "_shared = 1\n__version__ = '1'\n",
        "pkg/a.py": "_hidden = public = 2\n",
        "pkg/b.py": "from pkg.a import _hidden, public\nfrom pkg import __version__\nfrom os import _exit\n",
        "pkg/sub/__init__.py": "",
        "pkg/sub/c.py": "def f():\n    from .. import _shared\n",
    })
    assert private_imports(read_imports(root, ("pkg",))) == [
        "pkg.b imports _hidden from pkg.a (pkg/b.py:1)",
        "pkg.sub.c imports _shared from pkg (pkg/sub/c.py:2)",
    ]


def test_a_core_module_importing_a_plugin_is_reported(tmp_path):
    root = _tree(tmp_path, {
        "core/__init__.py": "",
        "core/run.py": "def f():\n    from plugins.p import P\n",
        "plugins/__init__.py": "",
        "plugins/p.py": "import core.run\nP = 1\n",
    })
    imports = read_imports(root, ("core", "plugins"))
    assert plugin_imports_of_core(imports, "core", ("plugins",)) == [
        "core.run imports plugins.p (core/run.py:2)"]


def test_a_string_import_up_the_floors_is_reported(tmp_path):
    """A lazy loader or a declaration naming a module by string is an import like any other."""
    root = _tree(tmp_path, {
        "core/__init__.py": "",
        "core/registry.py": "import importlib\ndef load():\n    importlib.import_module('core.top.run')\n",
        "core/base.py": "D = Decl(module='core.top.run', datasets={'x': 'core.top.run'})\n",
        "core/top/__init__.py": "",
        "core/top/run.py": "X = 1\n",
    })
    floors = (("__init__", "registry", "base"), ("top",))
    assert floor_violations(read_imports(root, ("core",)), floors, "core") == [
        "base imports top, a floor above it (core/base.py:1)",
        "registry imports top, a floor above it (core/registry.py:3)",
    ]


def test_an_import_up_the_floors_and_a_two_way_tie_are_reported(tmp_path):
    root = _tree(tmp_path, {
        "core/__init__.py": "",
        "core/base.py": "def f():\n    from core.top import run\n",
        "core/top/__init__.py": "",
        "core/top/run.py": "from core import base\n",
        "core/side.py": "import core.base\n",
        "core/lost.py": "import core.base\n",
    })
    floors = (("__init__", "base", "side"), ("top",))
    assert floor_violations(read_imports(root, ("core",)), floors, "core") == [
        "base and top import each other (core/base.py:2; core/top/run.py:1)",
        "base imports top, a floor above it (core/base.py:2)",
        "lost is on no floor of HARNESS_FLOORS (core/lost.py:1)",
    ]


def test_a_protocol_folder_importing_a_sibling_is_reported(tmp_path):
    """Plain, relative, in-function and by-string imports of another folder, each with its file and
    line; a folder's own modules, the core and the package itself are no sibling."""
    root = _tree(tmp_path, {
        "core/__init__.py": "",
        "core/shared.py": "X = 1\n",
        "plugins/__init__.py": "",
        "plugins/a/__init__.py": "",
        "plugins/a/common.py": "from core.shared import X\nimport plugins\n",
        "plugins/a/run.py": "from plugins.a.common import X\nfrom ..b import reader\n",
        "plugins/b/__init__.py": "",
        "plugins/b/reader.py": "def f():\n    import plugins.a.common\n",
        "plugins/c/__init__.py": "",
        "plugins/c/declaration.py": "D = Decl(module='plugins.a.run')\n",
    })
    imports = read_imports(root, ("core", "plugins"))
    assert sibling_protocol_imports(imports, "plugins") == [
        "plugins/a/run.py:2: plugins.a.run imports plugins.b.reader (a imports b)",
        "plugins/b/reader.py:2: plugins.b.reader imports plugins.a.common (b imports a)",
        "plugins/c/declaration.py:1: plugins.c.declaration imports plugins.a.run (c imports a)",
    ]
    (root / "plugins/a/run.py").write_text("from plugins.a.common import X\n")
    (root / "plugins/b/reader.py").write_text("from core.shared import X\n")
    (root / "plugins/c/declaration.py").write_text("D = Decl(module='plugins.c.run')\n")
    assert sibling_protocol_imports(read_imports(root, ("core", "plugins")), "plugins") == []
