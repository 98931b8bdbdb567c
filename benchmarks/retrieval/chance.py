"""What a random ranking scores: the exact expected trapezoidal AP (revisitop's compute_ap,
Holidays' score_ap_from_ranks_1) when the positives sit at a uniformly random subset of positions.

The j-th positive (zero-based, in ranking order) lands at position r with probability
C(r, j) C(n - 1 - r, R - 1 - j) / C(n, R); its trapezoid is (j / r + (j + 1) / (r + 1)) / 2 (the
first term is 1 at r = 0). A ``cutoff`` keeps only positions below it (a top-k list: a positive
not returned adds nothing).
"""
from __future__ import annotations

from functools import lru_cache

import numpy as np
from scipy.special import gammaln


def _log_comb(n: np.ndarray | int, k: np.ndarray | int) -> np.ndarray:
    return gammaln(np.asarray(n, dtype=np.float64) + 1) - gammaln(np.asarray(k, dtype=np.float64) + 1) \
        - gammaln(np.asarray(n, dtype=np.float64) - np.asarray(k, dtype=np.float64) + 1)


@lru_cache(maxsize=4096)
def expected_random_ap(n_items: int, n_relevant: int, n_positives: int | None = None,
                       cutoff: int | None = None) -> float:
    """E[AP] over uniformly random rankings of ``n_items`` holding ``n_relevant`` positives, the sum
    divided by ``n_positives`` (the ground-truth list's length; default ``n_relevant``)."""
    if n_relevant < 1 or n_items < n_relevant:
        raise ValueError(f"need 1 <= n_relevant <= n_items, found {n_relevant}, {n_items}")
    divisor = n_relevant if n_positives is None else n_positives
    last = n_items if cutoff is None else min(cutoff, n_items)
    total = 0.0
    log_all = float(_log_comb(n_items, n_relevant))
    for j in range(n_relevant):
        r = np.arange(j, min(n_items - n_relevant + j + 1, last))
        if len(r) == 0:
            break
        p = np.exp(_log_comb(r, j) + _log_comb(n_items - 1 - r, n_relevant - 1 - j) - log_all)
        before = np.where(r == 0, 1.0, j / np.maximum(r, 1))
        total += float((p * (before + (j + 1) / (r + 1)) / 2.0).sum())
    return total / divisor
