"""The script and stylesheet the HTML pages (leaderboard.html, report.html) inline.

They ship as files beside this module (static/sortable_table.js, static/table.css) and are
written into each page rather than linked, so a page stays one file that opens offline.
"""
from __future__ import annotations

from functools import lru_cache
from importlib import resources


@lru_cache(maxsize=None)
def _static(name: str) -> str:
    return resources.files(__package__).joinpath("static", name).read_text(encoding="utf-8")


def sortable_table_script() -> str:
    """JavaScript: a click on a ``th.sort`` header sorts its table by that column's ``data-v``
    values (numbers as numbers, empty cells last, ``aria-sort`` on the header); ``button.prov``
    opens a row's provenance panel; the ``#filter`` box hides ``tbody.item`` rows whose
    ``data-text`` does not contain what is typed."""
    return _static("sortable_table.js")


def table_stylesheet() -> str:
    """CSS of both pages: tables, sort arrows, best cells, deltas, provenance panels, verdicts."""
    return _static("table.css")


__all__ = ["sortable_table_script", "table_stylesheet"]
