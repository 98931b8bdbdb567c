"""Paste the output of `ssl-bench data list` into docs/DATASETS.md's `data list` block (after a
catalogue entry or a declaration's `datasets` / `reads` changes; tests/test_data_catalogue.py
fails until the copy is current).

    python -m scripts.update_data_list_doc
"""
from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

PAGE = Path(__file__).resolve().parents[1] / "docs" / "DATASETS.md"
BLOCK = re.compile(r"(<!-- data list -->\n```\n)(.*?)(\n```)", re.S)


def main() -> int:
    from harness.cli import main as cli

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        cli(["data", "list"])
    page = PAGE.read_text()
    if not BLOCK.search(page):
        raise SystemExit(f"{PAGE} has no `<!-- data list -->` block")
    PAGE.write_text(BLOCK.sub(lambda m: m.group(1) + out.getvalue().strip() + m.group(3), page))
    print(f"updated {PAGE}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
