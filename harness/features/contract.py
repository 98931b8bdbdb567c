"""The feature contract: what an extraction gives every protocol.

A protocol asks for features through :func:`harness.features.extract.extract_features` (one
extraction per model x images x transform x layer choice, cached by content) and reads them as a
:class:`FeatureSet`: the class token and the mean patch token of each image for the last
``n_last_blocks`` blocks, and, when asked, every patch token with its (h, w) grid. Images come from
an :class:`ImageSource`. This package sits below the protocols and above the models, so no
protocol imports the runner.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, Protocol as TypingProtocol

import numpy as np

Engine = Literal["threads", "plain"]
ENGINES = ("threads", "plain")
# Stage timings recorded in meta.json / FeatureSet.stages (seconds; see extract.py's `_Stages`).
STAGE_KEYS = ("load_s", "transform_s", "forward_s", "write_s", "wait_s", "wall_s")


class ImageSource(TypingProtocol):
    """load_image may be called from several threads at once (the "threads" engine); a
    source that cannot allow that sets ``thread_safe = False`` and is read by one thread."""

    def __len__(self) -> int: ...
    def load_image(self, i: int): ...
    def fingerprint(self) -> str: ...


@dataclass
class FeatureSet:
    """cls and patch_mean: (N, n_blocks, d); patches (optional): flat (P, n_blocks, d) with
    per-image offsets and (h, w) grids."""

    cls: np.ndarray
    patch_mean: np.ndarray
    grids: np.ndarray  # (N, 2)
    offsets: np.ndarray | None = None  # (N + 1,)
    patch_flat: np.ndarray | None = None
    key: str = ""
    from_cache: bool = False
    seconds: float = 0.0
    # How the extraction that produced this entry spent its time (see `_Stages`); empty for
    # cache entries written before stages were recorded.
    stages: dict = field(default_factory=dict)

    def __len__(self) -> int:
        return self.cls.shape[0]

    def patches(self, i: int) -> np.ndarray:
        """(n_blocks, h, w, d) patch tokens of image i."""
        if self.patch_flat is None:
            raise ValueError("patch tokens were not extracted (ask with patches=True)")
        h, w = self.grids[i]
        block = self.patch_flat[self.offsets[i]:self.offsets[i + 1]]
        return np.moveaxis(block.reshape(h, w, *block.shape[1:]), 2, 0)
