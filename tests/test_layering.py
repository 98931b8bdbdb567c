"""The core's layering: no module of harness/ imports a method or a protocol (only the
registry's lazy loader names the built-in packages, by string), and the harness modules
import one another without a cycle (imports inside functions count too)."""
import ast
from pathlib import Path

HARNESS = Path(__file__).resolve().parent.parent / "harness"
PLUGIN_PACKAGES = ("methods", "benchmarks")


def _module_name(path: Path) -> str:
    parts = path.relative_to(HARNESS.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path) -> set[str]:
    """Every module an import statement of ``path`` names (``from a import b`` gives a.b when
    b is a module, else a)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            base = HARNESS.parent.joinpath(*node.module.split("."))
            for alias in node.names:
                if (base / f"{alias.name}.py").is_file() or (base / alias.name / "__init__.py").is_file():
                    names.add(f"{node.module}.{alias.name}")
    return names


def _graph() -> dict[str, set[str]]:
    modules = {_module_name(p): p for p in HARNESS.rglob("*.py")}
    return {name: {m for m in _imports(path) if m in modules and m != name} for name, path in modules.items()}


def test_harness_imports_no_method_or_protocol():
    offenders = sorted(f"{_module_name(p)} imports {m}" for p in HARNESS.rglob("*.py") for m in _imports(p)
                       if m.split(".")[0] in PLUGIN_PACKAGES)
    assert not offenders, offenders


def test_harness_modules_import_without_cycles():
    graph = _graph()
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    cycles = []

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                cycles.append(path[path.index(nxt):] + [nxt])
            elif nxt not in state:
                visit(nxt, path + [nxt])
        state[node] = 2

    for start in sorted(graph):
        if start not in state:
            visit(start, [start])
    assert not cycles, [" -> ".join(c) for c in cycles]
