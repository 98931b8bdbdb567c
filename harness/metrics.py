"""Metrics as data: what a protocol's number means, declared once, read by every view.

A protocol states each metric it reports as a :class:`Metric`: its name, its unit, whether a
higher or a lower value is better, the per-image statistic its bootstrap interval is drawn from,
and how it reads in a header. Leaderboards, the run table, the report (stars, "indistinguishable
from best", deltas vs random init), margins, paper verdicts, plots and ``explain`` ask the metric
which value is better instead of assuming that higher is (lm-evaluation-harness's
``higher_is_better``, dinov3's ``is_lower_better``).

Torch-free and import-light: the tables read declarations without importing any protocol.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Iterable, Sequence

HIGHER = "higher"
LOWER = "lower"


@dataclass(frozen=True)
class Metric:
    """One number a protocol reports.

    ``direction``: "higher" or "lower" is better. ``per_image``: the kinds of per-image statistic
    (harness.per_image) the metric can be recomputed from on a resample of the evaluation images
    (a protocol whose presets keep different kinds names each); empty where it keeps none. ``label``: how a header
    reads it (default: the name).
    ``declared``: False for a metric found in records that no protocol here declares (read as
    higher-is-better, and said so by the views that show a direction)."""

    name: str
    unit: str = "%"
    direction: str = HIGHER
    per_image: tuple[str, ...] = ()
    label: str | None = None
    declared: bool = field(default=True, compare=False)

    def __post_init__(self):
        if self.direction not in (HIGHER, LOWER):
            raise ValueError(f"metric {self.name!r}: direction is 'higher' or 'lower', not {self.direction!r}")
        if not self.name or not isinstance(self.name, str):
            raise ValueError(f"a metric needs a name, found {self.name!r}")
        kinds = (self.per_image,) if isinstance(self.per_image, str) else tuple(self.per_image or ())
        object.__setattr__(self, "per_image", kinds)

    @property
    def higher_is_better(self) -> bool:
        return self.direction == HIGHER

    @property
    def header(self) -> str:
        return self.label or self.name

    @property
    def arrow(self) -> str:
        """The direction as headers show it: "↑" or "↓"."""
        return "↑" if self.higher_is_better else "↓"

    def sign(self) -> int:
        """+1 where higher is better, -1 where lower is: ``sign() * (a - b) > 0`` means a is better."""
        return 1 if self.higher_is_better else -1

    def gain(self, value: float, reference: float) -> float:
        """How much better ``value`` is than ``reference`` (negative: worse), in the metric's unit."""
        return self.sign() * (value - reference)

    def is_better(self, a: float, b: float) -> bool:
        """Strictly better; a NaN is never better, and anything is better than a NaN."""
        if _missing(a):
            return False
        if _missing(b):
            return True
        return self.gain(a, b) > 0

    def best(self, values: Iterable[float]) -> float:
        """The best of ``values`` (NaN and None left out); NaN when none is left."""
        kept = [float(v) for v in values if not _missing(v)]
        if not kept:
            return math.nan
        return max(kept) if self.higher_is_better else min(kept)

    def best_index(self, values: Sequence[float]) -> int | None:
        """Position of the first best value, None when every value is missing."""
        target = self.best(values)
        if _missing(target):
            return None
        return next(i for i, v in enumerate(values) if not _missing(v) and float(v) == target)

    def worst_value(self) -> float:
        return -math.inf if self.higher_is_better else math.inf

    def compare_word(self, value: float, reference: float) -> str:
        """"better", "worse" or "equal": how ``value`` reads beside ``reference``."""
        g = self.gain(value, reference)
        return "better" if g > 0 else "worse" if g < 0 else "equal"


def undeclared(name: str) -> Metric:
    """A metric found in records that no protocol here declares: higher-is-better by the field's
    usual reading, flagged as not declared."""
    return Metric(name=name, unit="", declared=False)


def metric_table(metrics: Iterable[Metric]) -> dict[str, Metric]:
    """Name -> metric, refusing two declarations of one name."""
    table: dict[str, Metric] = {}
    for m in metrics:
        if not isinstance(m, Metric):
            raise TypeError(f"expected harness.metrics.Metric, found {type(m).__name__}: {m!r}")
        if m.name in table:
            raise ValueError(f"metric {m.name!r} declared twice")
        table[m.name] = m
    return table


def _missing(v) -> bool:
    if v is None:
        return True
    try:
        return math.isnan(float(v))
    except (TypeError, ValueError):
        return True
