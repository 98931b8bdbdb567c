"""The three published metrics of linear transfer, as SynCLR's main_downstream_linear.py computes them.

- ``top1``: correct / images (``clf.score``).
- ``mean_per_class``: the mean over classes of each class's accuracy, from sklearn's
  ``confusion_matrix(y_true, y_pred)``: its rows are the labels seen in either argument, so a class
  predicted but absent from the evaluated images has a 0/0 row and the whole mean is NaN (on a
  validation split that C is then never selected, since NaN > best is false).
- ``mAP``: per class, the 11-point interpolated AP of the decision values, averaged. The official
  ``voc_ap`` runs on sklearn's ``precision_recall_curve``, which appends the point (precision 1,
  recall 0): at recall threshold 0 the maximum precision is therefore always 1 (the VOC devkit's
  VOCevalcls takes the best precision of the real points there). ``curve="devkit"`` drops that point.
  Tied scores form one point of the curve, as in sklearn.

The AP functions take per-image weights (a bootstrap resample's counts), so the interval of a
record is the metric of each resample computed by the same code.
"""
from __future__ import annotations

import numpy as np

RECALL_POINTS = np.linspace(0, 1, 11)


def top1(labels: np.ndarray, predictions: np.ndarray) -> float:
    return 100.0 * float(np.mean(np.asarray(labels) == np.asarray(predictions)))


def mean_per_class(labels: np.ndarray, predictions: np.ndarray) -> float:
    """100 x the mean of per-class accuracies over the labels of either array (NaN when a predicted
    class has no image), as the official confusion-matrix diagonal / row sums."""
    labels, predictions = np.asarray(labels), np.asarray(predictions)
    seen = np.union1d(labels, predictions)
    counts = np.array([np.sum(labels == c) for c in seen], dtype=np.float64)
    hits = np.array([np.sum((labels == c) & (predictions == c)) for c in seen], dtype=np.float64)
    if np.any(counts == 0):
        return float("nan")
    return 100.0 * float(np.mean(hits / counts))


def _curve_points(scores: np.ndarray, positive: np.ndarray, weights: np.ndarray):
    """Precision and recall (B, G) at each distinct score, highest first, for weights (B, N)."""
    order = np.argsort(scores, kind="mergesort")[::-1]
    s = scores[order]
    ends = np.r_[np.flatnonzero(np.diff(s)), s.size - 1]
    w = weights[:, order]
    tps = np.cumsum(w * positive[order], axis=1)[:, ends]
    fps = np.cumsum(w * (1 - positive[order]), axis=1)[:, ends]
    seen = tps + fps
    precision = np.divide(tps, seen, out=np.zeros_like(tps), where=seen > 0)
    total = tps[:, -1:]
    with np.errstate(divide="ignore", invalid="ignore"):
        recall = tps / total  # NaN where the resample holds no positive (sklearn: a warning, NaN)
    return precision, recall


def eleven_point_ap(scores: np.ndarray, positive: np.ndarray, weights: np.ndarray | None = None,
                    curve: str = "sklearn") -> np.ndarray:
    """11-point interpolated AP of one class, one value per row of ``weights`` (B, N); one row of
    ones when None. ``curve``: "sklearn" (official: the appended (1, 0) point) or "devkit"."""
    scores = np.asarray(scores, dtype=np.float64).ravel()
    positive = (np.asarray(positive).ravel() == 1).astype(np.float64)
    w = np.ones((1, scores.size)) if weights is None else np.atleast_2d(np.asarray(weights, dtype=np.float64))
    precision, recall = _curve_points(scores, positive, w)
    ap = np.zeros(w.shape[0])
    for t in RECALL_POINTS:
        reach = recall >= t  # NaN recall reaches nothing
        best = np.where(reach, precision, -np.inf).max(axis=1)
        if t == 0 and curve == "sklearn":
            best = np.maximum(best, 1.0)  # the appended (precision 1, recall 0) point
        ap += np.where(np.isfinite(best), best, 0.0) / 11.0
    return ap


def mean_ap(scores: np.ndarray, labels: np.ndarray, weights: np.ndarray | None = None,
            curve: str = "sklearn") -> np.ndarray:
    """100 x the mean over classes of :func:`eleven_point_ap`; scores and labels (N, C)."""
    scores, labels = np.asarray(scores), np.asarray(labels)
    per_class = [eleven_point_ap(scores[:, c], labels[:, c], weights, curve) for c in range(labels.shape[1])]
    return 100.0 * np.mean(np.stack(per_class, axis=1), axis=1)
