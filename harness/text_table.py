"""Plain-text tables for the console: columns padded to their widest cell, two spaces apart."""
from __future__ import annotations

from typing import Collection, Sequence


def text_table(header: Sequence[str], rows: Sequence[Sequence[str]], right: Collection[int] = frozenset()) -> str:
    """Header, a dashed rule, then the rows; columns whose index is in ``right`` are
    right-aligned (numbers), the others left-aligned."""
    widths = [max(len(x) for x in [h] + [r[j] for r in rows]) for j, h in enumerate(header)]
    fmt = lambda r: "  ".join(v.rjust(w) if j in right else v.ljust(w)  # noqa: E731
                              for j, (v, w) in enumerate(zip(r, widths))).rstrip()
    return "\n".join([fmt(header), "  ".join("-" * w for w in widths)] + [fmt(r) for r in rows])
