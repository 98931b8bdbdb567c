"""Nothing edits ``sys.path`` but tests/conftest.py and the one helper of each reference
generator that imports an official checkout kept outside this repository
(docs/ARCHITECTURE.md, "Layering"): everything else runs as a module from the repository root."""
import ast
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ALLOWED = {("tests/conftest.py", None), ("tests/reference/common.py", "on_import_path"),
           ("scripts/official_parity/generate_fixtures.py", "official_on_path"),
           ("benchmarks/retrieval/reference/retrieval_reference.py", "official_on_path"),
           ("benchmarks/depth/reference/depth_reference.py", "official_on_path"),
           ("benchmarks/detection/parity/make_official_fixture.py", "official_on_path"),
           ("benchmarks/finetune/reference/official_ibot.py", "official_on_path")}


def _is_sys_path(node: ast.AST) -> bool:
    return (isinstance(node, ast.Attribute) and node.attr == "path" and isinstance(node.value, ast.Name)
            and node.value.id == "sys")


def _edits(tree: ast.AST):
    """(enclosing function or None, line) of each call of a sys.path method and each
    assignment to sys.path or a slice of it."""
    def visit(node, func):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            func = node.name
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and _is_sys_path(node.func.value)
                and node.func.attr in ("insert", "append", "extend", "remove", "pop", "clear")):
            yield func, node.lineno
        if isinstance(node, (ast.Assign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for t in targets:
                if _is_sys_path(t) or (isinstance(t, ast.Subscript) and _is_sys_path(t.value)):
                    yield func, node.lineno
        for child in ast.iter_child_nodes(node):
            yield from visit(child, func)

    yield from visit(tree, None)


def test_no_sys_path_edits_outside_the_sanctioned_helpers():
    files = subprocess.run(["git", "ls-files", "*.py"], cwd=ROOT, capture_output=True, text=True,
                           check=True).stdout.split()
    offenders = []
    for rel in files:
        path = ROOT / rel
        if not path.is_file():
            continue
        for func, line in _edits(ast.parse(path.read_text(), rel)):
            if (rel, None) not in ALLOWED and (rel, func) not in ALLOWED:
                offenders.append(f"{rel}:{line} ({func or 'module level'})")
    assert not offenders, ("sys.path edited outside tests/conftest.py and the reference generators' helpers; "
                           f"run the script as a module from the repository root instead: {offenders}")
