"""Revisited Oxford / Paris evaluation (Radenovic et al. 2018), as filipradenovic/revisitop
``python/evaluate.py`` computes it, written anew: the average precision of one ranking with
junk images removed from it, and the Easy / Medium / Hard ground truths built from the
``gnd_*.pkl`` entries as ``python/example_evaluate.py`` builds them.

The protocol never sorts the whole database: it needs only where each labelled image
(positive or junk) lands in a query's ranking (``benchmarks.retrieval.search``), and the
average precision below reads nothing else.
"""
from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np

DIFFICULTIES = ("easy", "medium", "hard")


def difficulty_gnd(gnd: Sequence[Mapping], difficulty: str) -> list[dict[str, np.ndarray]]:
    """Per query {"ok", "junk"} for one setup (revisitop example_evaluate.py): easy = easy
    positives, hard and junk ignored; medium = easy + hard positives, junk ignored; hard = hard
    positives, easy and junk ignored."""
    parts = {"easy": (("easy",), ("junk", "hard")), "medium": (("easy", "hard"), ("junk",)),
             "hard": (("hard",), ("junk", "easy"))}[difficulty]
    return [{"ok": _cat(g, parts[0]), "junk": _cat(g, parts[1])} for g in gnd]


def _cat(g: Mapping, keys) -> np.ndarray:
    return np.concatenate([np.asarray(g[k], dtype=np.int64).reshape(-1) for k in keys])


def average_precision(positions: np.ndarray, n_positives: int) -> float:
    """Trapezoidal AP over the zero-based positions of the positives (junk already removed),
    in increasing order (revisitop compute_ap: precision before and after each positive)."""
    if len(positions) == 0:
        return 0.0
    j = np.arange(len(positions), dtype=np.float64)
    pos = np.asarray(positions, dtype=np.float64)
    before = np.where(pos == 0, 1.0, j / np.where(pos == 0, 1.0, pos))
    after = (j + 1) / (pos + 1)
    return float(((before + after) / 2.0).sum() / n_positives)


def query_ap(rank_of: Mapping[int, int] | np.ndarray, ok: np.ndarray, junk: np.ndarray) -> float:
    """AP of one query from ``rank_of`` (database index -> zero-based rank in the query's
    ranking, for at least every index in ``ok`` and ``junk``). NaN when ``ok`` is empty (the
    query is left out of the mean, as compute_map does)."""
    if len(ok) == 0:
        return float("nan")
    n_positives = len(ok)  # compute_ap's nres: the list's length, repeats included
    ok, junk = np.unique(ok), np.unique(junk)
    pos = np.sort(np.array([rank_of[i] for i in ok], dtype=np.int64))
    jpos = np.sort(np.array([rank_of[i] for i in junk], dtype=np.int64))
    # each positive moves up by the junk images ranked strictly before it (an image listed as
    # both positive and junk stays a positive and lifts the positives after it, as in revisitop)
    pos = pos - np.searchsorted(jpos, pos, side="left")
    return average_precision(pos, n_positives)


def aps_from_ranks(ranks: np.ndarray, gnd: Sequence[Mapping]) -> np.ndarray:
    """Per-query AP from a full ranking ``ranks`` (database size x queries, database indices
    best first), the input of revisitop's compute_map; NaN for queries without positives."""
    ranks = np.asarray(ranks)
    out = np.empty(len(gnd))
    for q, g in enumerate(gnd):
        rank_of = np.empty(ranks.shape[0], dtype=np.int64)
        rank_of[ranks[:, q]] = np.arange(ranks.shape[0])
        out[q] = query_ap(rank_of, np.asarray(g["ok"]), np.asarray(g.get("junk", [])))
    return out


def mean_ap(aps: np.ndarray) -> float:
    """compute_map's mean: queries without positives (NaN) are left out."""
    aps = np.asarray(aps, dtype=np.float64)
    kept = aps[~np.isnan(aps)]
    return float(kept.mean()) if len(kept) else float("nan")
