"""A method module reads the other methods' pieces only through methods/shared.py."""
from __future__ import annotations

import ast
from pathlib import Path

METHODS_DIR = Path(__file__).resolve().parents[1] / "methods"
ALLOWED = {"methods.shared"}


def _imported_modules(path: Path) -> set[str]:
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            out.add(node.module)
            if node.module == "methods":
                out.update(f"methods.{a.name}" for a in node.names)
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
    return out


def test_methods_import_each_other_only_through_shared():
    for path in sorted(METHODS_DIR.glob("*.py")):
        if path.name in ("__init__.py", "shared.py"):
            continue
        others = {m for m in _imported_modules(path) if m.startswith("methods.") and m not in ALLOWED}
        assert not others, f"{path.name} imports {sorted(others)}; take shared pieces from methods.shared"
