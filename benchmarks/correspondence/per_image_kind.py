"""The per-pair statistics of SPair-71k PCK (harness.per_image kind ``category_pck``).

Probe3D's number is a mean over categories of each category's PCK over its keypoints (the
keypoints of all its evaluated pairs pooled), one such mean per viewpoint bin. Neither a mean
over pairs nor one ratio of sums gives that, so each evaluated pair is a row holding its
correct and counted keypoints in its (bin, category) cell; a bootstrap resample of the rows is
scored by summing the cells and averaging the categories anew (a category without keypoints in
the resample is left out, as Probe3D leaves out a category without pairs in a bin).
"""
from __future__ import annotations

from typing import Any

import numpy as np

from harness.per_image import PerImageError, PerImageStats, decode_array, encode_array, register_kind

KIND = "category_pck"


def category_pck_block(cells: list[tuple[str, str]], cell: np.ndarray, hits: np.ndarray, counts: np.ndarray,
                       metric_bins: dict[str, str], scale: float = 100.0) -> dict[str, Any]:
    """``cells``: the (bin, category) names; per evaluated pair its cell index, its keypoints
    within the threshold and its keypoints counted; ``metric_bins``: metric -> bin."""
    return {"kind": KIND, "metrics": list(metric_bins), "images": int(len(cell)), "scale": float(scale),
            "bins": [metric_bins[m] for m in metric_bins], "cells": [list(c) for c in cells],
            "cell": encode_array(np.asarray(cell, dtype=np.int64)),
            "hits": encode_array(np.asarray(hits, dtype=np.int64)),
            "counts": encode_array(np.asarray(counts, dtype=np.int64))}


def mean_over_categories(hits: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """(B,) mean over the columns with a count of hits / count; NaN where no column has one."""
    with np.errstate(invalid="ignore", divide="ignore"):
        ratio = np.where(counts > 0, hits / np.where(counts > 0, counts, 1), 0.0)
        n = (counts > 0).sum(1)
        return np.where(n > 0, ratio.sum(1) / np.maximum(n, 1), np.nan)


@register_kind(KIND)
class CategoryPCKStats(PerImageStats):
    """Each pair's hits and keypoint count in its (bin, category) cell."""

    def read_rows(self, block):
        cell, hits, counts = (decode_array(block.get(k)).astype(np.int64) for k in ("cell", "hits", "counts"))
        self.cells = [tuple(c) for c in block.get("cells") or []]
        self.bins = [str(b) for b in block.get("bins") or []]
        self.scale = float(block.get("scale", 100.0))
        if not (cell.shape == hits.shape == counts.shape and cell.ndim == 1) or len(self.bins) != len(self.metrics):
            raise PerImageError(f"category_pck block with cell {cell.shape}, hits {hits.shape}, counts {counts.shape}")
        if cell.size and (cell.min() < 0 or cell.max() >= len(self.cells)):
            raise PerImageError(f"category_pck block: a cell index outside the {len(self.cells)} cells")
        n = len(self.cells)
        rows = np.zeros((len(cell), 2 * n), dtype=np.int64)
        rows[np.arange(len(cell)), cell] = hits
        rows[np.arange(len(cell)), n + cell] = counts
        return rows

    def metric_of(self, sums, metric):
        b = self.bins[self.metrics.index(metric)]
        cols = [i for i, c in enumerate(self.cells) if c[0] == b]
        n = len(self.cells)
        return self.scale * mean_over_categories(sums[:, cols], sums[:, [n + i for i in cols]])
