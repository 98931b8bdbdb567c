"""The four clustering scores of unsup_cls.py's ``eval_pred`` (bytedance/ibot
evaluation/unsupervised/unsup_cls.py), computed from a contingency table so that a bootstrap
resample (a reweighted table) is scored exactly as the whole set is.

NMI, ARI and FMI follow scikit-learn's ``normalized_mutual_info_score`` (arithmetic mean of
the entropies), ``adjusted_rand_score`` and ``fowlkes_mallows_score`` term for term (the same
formulas in the same order, so the numbers agree to the last bits); scikit-learn itself is not
needed. ACC is ``get_y_preds`` + ``accuracy_score`` as unsup_cls.py computes it, quirks
included (see :func:`official_acc`). All four are fractions in [0, 1] (ARI can be negative).
"""
from __future__ import annotations

import math

import numpy as np


class AccUndefined(ValueError):
    """The official matching cannot score this assignment (unsup_cls.py raises IndexError)."""


def contingency(labels: np.ndarray, clusters: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(table, label values, cluster values): counts of each (label, cluster) pair, rows and
    columns the sorted values present."""
    lv, li = np.unique(np.asarray(labels), return_inverse=True)
    cv, ci = np.unique(np.asarray(clusters), return_inverse=True)
    table = np.zeros((len(lv), len(cv)), dtype=np.int64)
    np.add.at(table, (li.ravel(), ci.ravel()), 1)
    return table, lv, cv


def _entropy(counts: np.ndarray) -> float:
    """sklearn.metrics.cluster.entropy of a labelling given its class counts."""
    pi = counts[counts > 0].astype(np.float64)
    if pi.size <= 1:
        return 0.0
    total = pi.sum()
    return float(-np.sum((pi / total) * (np.log(pi) - math.log(total))))


def mutual_info(table: np.ndarray) -> float:
    """sklearn.metrics.mutual_info_score from a contingency table."""
    pi, pj = table.sum(1), table.sum(0)
    if (pi > 0).sum() == 1 or (pj > 0).sum() == 1:
        return 0.0
    nzx, nzy = np.nonzero(table)
    nz_val = table[nzx, nzy].astype(np.float64)
    total = nz_val.sum()
    log_nm = np.log(nz_val)
    nm = nz_val / total
    outer = pi.take(nzx).astype(np.int64) * pj.take(nzy).astype(np.int64)
    log_outer = -np.log(outer) + math.log(pi.sum()) + math.log(pj.sum())
    mi = nm * (log_nm - math.log(total)) + nm * log_outer
    mi = np.where(np.abs(mi) < np.finfo(mi.dtype).eps, 0.0, mi)
    return float(np.clip(mi.sum(), 0.0, None))


def nmi(table: np.ndarray) -> float:
    """normalized_mutual_info_score(average_method="arithmetic")."""
    rows, cols = (table.sum(1) > 0).sum(), (table.sum(0) > 0).sum()
    if rows == cols == 1 or rows == cols == 0:
        return 1.0
    mi = mutual_info(table)
    if mi == 0:
        return 0.0
    h_true, h_pred = _entropy(table.sum(1)), _entropy(table.sum(0))
    return float(mi / ((h_true + h_pred) / 2))


def ari(table: np.ndarray) -> float:
    """adjusted_rand_score through the pair confusion matrix, in Python integers as sklearn."""
    n = int(table.sum())
    n_c, n_k = table.sum(1).astype(np.int64), table.sum(0).astype(np.int64)
    sum_squares = int((table.astype(np.int64) ** 2).sum())
    tp = sum_squares - n
    fp = int((table @ n_k).sum()) - sum_squares
    fn = int((table.T @ n_c).sum()) - sum_squares
    tn = n * n - fp - fn - sum_squares
    if fn == 0 and fp == 0:
        return 1.0
    return 2.0 * (tp * tn - fn * fp) / ((tp + fn) * (fn + tn) + (tp + fp) * (fp + tn))


def fmi(table: np.ndarray) -> float:
    """fowlkes_mallows_score."""
    n = int(table.sum())
    t = table.astype(np.int64)
    tk = int((t * t).sum()) - n
    pk = int((t.sum(0) ** 2).sum()) - n
    qk = int((t.sum(1) ** 2).sum()) - n
    return float(math.sqrt(tk / pk) * math.sqrt(tk / qk)) if tk != 0 else 0.0


def official_acc(table: np.ndarray, label_values: np.ndarray, cluster_values: np.ndarray) -> float:
    """unsup_cls.py ``get_y_preds`` then ``accuracy_score``, from the contingency table.

    The official code builds sklearn's confusion matrix over the sorted union U of the label and
    cluster values, keeps its first n x n block (n = number of distinct labels), matches with
    Munkres, and reads the match as ``mapping[cluster - min(cluster)]``: a position in U is taken
    as a label value, and the clusters are shifted when cluster 0 is unused. Both quirks are kept.
    Where the official indexing fails (a cluster value - min >= n: IndexError) this raises
    AccUndefined. Munkres is replaced by scipy's linear_sum_assignment: both are optimal, so the
    matched count is the same; they can differ only between equally good matchings, which
    changes ACC only when a quirk above is in play."""
    present = table.sum(1) > 0, table.sum(0) > 0
    table, label_values, cluster_values = table[present[0]][:, present[1]], label_values[present[0]], \
        cluster_values[present[1]]
    n = len(label_values)
    union = np.union1d(label_values, cluster_values)
    pos_l, pos_c = np.searchsorted(union, label_values), np.searchsorted(union, cluster_values)
    conf = np.zeros((len(union), len(union)), dtype=np.int64)
    conf[np.ix_(pos_l, pos_c)] = table
    block = conf[:n, :n]
    cost = conf[:, :n].sum(0)[:, None] - block.T  # cost[j, i]: cluster position j -> label position i
    from scipy.optimize import linear_sum_assignment  # 0.6 s of import: only when a matching is made

    rows, cols = linear_sum_assignment(cost)
    mapping = np.zeros(n)
    mapping[rows] = cols
    shifted = cluster_values - cluster_values.min()
    if shifted.max() >= n:
        raise AccUndefined(f"cluster value {int(cluster_values[np.argmax(shifted)])} is beyond the {n} labels "
                           f"present: unsup_cls.py's get_y_preds indexes out of range there")
    predicted = mapping[shifted]  # the label each cluster column is read as
    hits = (predicted[None, :] == label_values[:, None]) * table
    return float(hits.sum() / table.sum())


def hungarian_acc(table: np.ndarray) -> float:
    """The opt-in ``acc_matching: hungarian``: the one-to-one matching of clusters to labels
    that maximises the matched images, on the table itself (any number of clusters; images of
    unmatched clusters count as wrong), matched images over all images."""
    from scipy.optimize import linear_sum_assignment

    rows, cols = linear_sum_assignment(table, maximize=True)
    return float(table[rows, cols].sum() / table.sum())


def acc(table: np.ndarray, label_values: np.ndarray, cluster_values: np.ndarray, matching: str) -> float:
    if matching == "hungarian":
        return hungarian_acc(table)
    return official_acc(table, label_values, cluster_values)


def scores(table: np.ndarray, label_values: np.ndarray, cluster_values: np.ndarray,
           matching: str = "official") -> dict[str, float]:
    """{"ACC", "ARI", "NMI", "FMI"} as fractions; ACC NaN where the official matching is undefined."""
    try:
        value = acc(table, label_values, cluster_values, matching)
    except AccUndefined:
        value = float("nan")
    return {"ACC": value, "ARI": ari(table), "NMI": nmi(table), "FMI": fmi(table)}


def contingency_of(labels: np.ndarray, clusters: np.ndarray, copies: int = 1):
    """(table, label values, cluster values) as the official code sees them (``copies`` stacked copies)."""
    table, lv, cv = contingency(labels, clusters)
    return table * int(copies), lv, cv


def assignment_scores(labels: np.ndarray, clusters: np.ndarray, matching: str = "official",
                      copies: int = 1) -> dict[str, float]:
    """:func:`scores` of two per-image arrays, as the official code scores ``copies`` stacked copies of
    them (see the protocol's ``gather_copies``); an undefined ACC is an AccUndefined error here."""
    table, lv, cv = contingency(labels, clusters)
    table = table * int(copies)
    return {"ACC": acc(table, lv, cv, matching), "ARI": ari(table), "NMI": nmi(table), "FMI": fmi(table)}
