"""A result's variant (what tells a run's results apart: ``fraction=1/8``, ``k=20``) as text and
back, and fraction values; records, leaderboards and paper tables read variants the same way."""
from __future__ import annotations

from fractions import Fraction
from typing import Any


def variant_label(variant: dict | None) -> str:
    """Canonical text of a variant dict: ``fraction=1/8,k=20`` (keys sorted)."""
    if not variant:
        return ""
    return ",".join(f"{k}={_fmt_value(v)}" for k, v in sorted(variant.items()))


def _fmt_value(v: Any) -> str:
    if isinstance(v, float) and v.is_integer():
        return str(int(v))
    return str(v)


def parse_variant(label: str) -> dict[str, str]:
    if not label:
        return {}
    return dict(item.split("=", 1) for item in label.split(","))


def fraction_value(v: Any) -> float | None:
    """``"1/8"``, ``0.125``, ``"0.125"`` -> 0.125; None if it is not a fraction."""
    try:
        if isinstance(v, str) and "/" in v:
            return float(Fraction(v.strip()))
        return float(v)
    except (ValueError, ZeroDivisionError, TypeError):
        return None
