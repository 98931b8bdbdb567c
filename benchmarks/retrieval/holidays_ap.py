"""Copydays' score as DINO's ``eval_copy_detection.py`` computes it: AP of each query's top-k list
with the Holidays package's trapezoids (``score_ap_from_ranks_1``), mAP per block over its queries."""
from __future__ import annotations

import numpy as np


def holidays_ap(ranks: list[int], n_positives: int) -> float:
    """score_ap_from_ranks_1: trapezoids over the ranks (zero-based, increasing) of the
    positives found in the returned list; positives not returned add nothing."""
    ap = 0.0
    for ntp, rank in enumerate(ranks):
        before = 1.0 if rank == 0 else ntp / float(rank)
        ap += (before + (ntp + 1) / float(rank + 1)) / (2.0 * n_positives)
    return ap


def block_aps(ids: np.ndarray, positives: list[list[int]]) -> np.ndarray:
    """AP per query of one block from its top-k database indices (Q, k)."""
    return np.array([holidays_ap([r for r, b in enumerate(row) if int(b) in set(pos)], len(pos))
                     for row, pos in zip(ids, positives)])
