"""Habits the code base keeps (issue 45): functions short enough to read in one screen, docs
pages short enough to read in one sitting. Each check has an allow-list (empty: an exception
must be argued for there); an entry that no longer offends fails the check too, so the list
never goes stale."""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

MAX_FUNCTION_LINES = 60
MAX_DOCS_PAGE_LINES = 700

# Functions allowed over the limit (none: a new one must be split or argued for here).
STILL_LONG: set[tuple[str, str]] = set()

# Docs pages allowed over the limit (none: split a long page by subject).
STILL_LONG_DOCS: set[str] = set()


def _statements(body: list):
    """Every statement under ``body``, nested ones included; a function is only ever a statement,
    so the expressions (most of a tree's nodes) need no visit."""
    for node in body:
        yield node
        for field in ("body", "orelse", "finalbody", "handlers", "cases"):
            inner = getattr(node, field, None)
            if isinstance(inner, list):
                yield from _statements(inner)


def _long_functions() -> dict[tuple[str, str], int]:
    """(file, function name) -> lines, for every function over the limit in the packages."""
    found = {}
    for pkg in ("harness", "benchmarks", "methods"):
        for path in sorted((ROOT / pkg).rglob("*.py")):
            text = path.read_text(encoding="utf-8")
            if text.count("\n") < MAX_FUNCTION_LINES:  # too short to hold a function over the limit
                continue
            for node in _statements(ast.parse(text).body):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    n = node.end_lineno - node.lineno + 1
                    if n > MAX_FUNCTION_LINES:
                        found[(path.relative_to(ROOT).as_posix(), node.name)] = n
    return found


def _long_docs_pages() -> dict[str, int]:
    found = {}
    # the docs, and the pages of the protocol folders (their README.md, PARITY.md, ...)
    for path in sorted([*(ROOT / "docs").rglob("*.md"), *(ROOT / "benchmarks").rglob("*.md")]):
        n = len(path.read_text(encoding="utf-8").splitlines())
        if n > MAX_DOCS_PAGE_LINES:
            found[path.relative_to(ROOT).as_posix()] = n
    return found


def _check(found: dict, allowed: set, what: str, limit: int, fix: str) -> None:
    new = sorted(f"{k} ({n} lines)" for k, n in found.items() if k not in allowed)
    stale = sorted(str(k) for k in allowed if k not in found)
    problems = []
    if new:
        problems.append(f"{what} over {limit} lines: {'; '.join(new)}; {fix}")
    if stale:
        problems.append(f"allow-listed {what} no longer over {limit} lines: {'; '.join(stale)}; "
                        f"remove them from the allow-list in tests/test_habits.py")
    assert not problems, "\n".join(problems)


def test_no_function_over_60_lines():
    _check(_long_functions(), STILL_LONG, "functions", MAX_FUNCTION_LINES,
           "split each into well-named functions with one job each")


def test_no_docs_page_over_700_lines():
    _check(_long_docs_pages(), STILL_LONG_DOCS, "docs pages", MAX_DOCS_PAGE_LINES,
           "split each by subject into pages under a folder, with the page as their index")
