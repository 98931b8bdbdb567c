"""What a protocol shows of itself, one example at a time: the input as the model saw it after
the protocol's transform, the target and the prediction, as panels (`ssl-bench show`). Plain data
(numpy arrays and text), drawn by harness.results.panels."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import numpy as np

PanelKind = Literal["rgb", "labels", "values", "text"]


@dataclass
class Panel:
    """One picture of an example. ``rgb``: (H, W, 3) uint8; ``labels``: (H, W) integer classes
    (``ignore`` drawn blank); ``values``: (H, W) floats (depth, error) with ``unit``; ``text``: a
    caption only; ``value_range``: the colour scale of a ``values`` map, shared by panels meant to
    be compared (ground truth and prediction). ``lines``: (K, 4) segments (x0, y0, x1, y1) in the
    image's pixels drawn over it (keypoint matches across two images set side by side), each
    green where ``line_ok`` is true, red where false, white without it."""

    label: str
    kind: PanelKind = "rgb"
    image: np.ndarray | None = None
    text: str = ""
    ignore: int | None = None
    unit: str = ""
    value_range: tuple[float, float] | None = None  # a values map's colour scale; None: its own
    lines: np.ndarray | None = None
    line_ok: np.ndarray | None = None

    def __post_init__(self):
        if self.kind != "text" and self.image is None:
            raise ValueError(f"panel {self.label!r} of kind {self.kind!r} needs an image")
        if self.kind == "rgb" and (self.image.ndim != 3 or self.image.shape[2] != 3):
            raise ValueError(f"panel {self.label!r}: an rgb image is (H, W, 3), found {self.image.shape}")
        if self.kind in ("labels", "values") and self.image.ndim != 2:
            raise ValueError(f"panel {self.label!r}: a {self.kind} map is (H, W), found {self.image.shape}")
        if self.lines is not None:
            self.lines = np.asarray(self.lines, dtype=np.float64).reshape(-1, 4)
            if self.kind == "text":
                raise ValueError(f"panel {self.label!r}: a text panel has no image to draw lines on")
            if self.line_ok is not None and len(self.line_ok) != len(self.lines):
                raise ValueError(f"panel {self.label!r}: {len(self.line_ok)} line_ok flags for {len(self.lines)} lines")


@dataclass
class Example:
    """One evaluation item and its panels, left to right (input, target, prediction, ...)."""

    title: str
    panels: list[Panel] = field(default_factory=list)
    correct: bool | None = None  # whether the prediction is right, where that is one bit


def seen_by_model(tensor, mean, std) -> np.ndarray:
    """A transformed (3, H, W) image tensor back to (H, W, 3) uint8, as the model saw it: the
    normalisation undone, nothing else (crop and resize stay)."""
    x = np.asarray(tensor.detach().cpu().float() if hasattr(tensor, "detach") else tensor, dtype=np.float32)
    x = x * np.asarray(std, dtype=np.float32)[:, None, None] + np.asarray(mean, dtype=np.float32)[:, None, None]
    return (np.clip(x.transpose(1, 2, 0), 0.0, 1.0) * 255.0 + 0.5).astype(np.uint8)


def chosen_items(n: int, count: int, seed: int) -> list[int]:
    """``count`` distinct item indices of ``n``, drawn with ``seed``, in ascending order."""
    rng = np.random.default_rng(seed)
    return sorted(int(i) for i in rng.choice(n, size=min(count, n), replace=False))
