"""The Python examples of docs/MODELS.md run as scripts safely: they compile, and one that
evaluates keeps its work under ``if __name__ == "__main__":`` (worker processes import the
script again)."""
from __future__ import annotations

import ast
import re
from pathlib import Path

DOC = Path(__file__).resolve().parent.parent / "docs" / "MODELS.md"


def test_models_md_python_examples_are_guarded():
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.S)
    assert blocks
    for code in blocks:
        tree = ast.parse(code)
        if "evaluate(" not in code:
            continue
        top_calls = [n for n in tree.body if isinstance(n, ast.Expr) and isinstance(n.value, ast.Call)]
        top_assigns = [n for n in tree.body if isinstance(n, ast.Assign)]
        assert not top_calls and not top_assigns, code  # nothing runs at import
        assert any(isinstance(n, ast.If) and "__main__" in ast.unparse(n.test) for n in tree.body), code
