"""SynCLR's linear-transfer recipe on features in hand (google-research/syn-rep-learn @ 45f451b,
SynCLR/eval/main_downstream_linear.py: ``load_features`` then ``lbfgs_gpu``).

- Standardise: train and val with the mean and std (ddof 0) of train; train+val and test with those
  of train+val.
- For each weight decay of ``torch.logspace(-6, 5, 45)`` (float32, as the script builds it), C = 1/wd:
  fit on train, score val with the data set's metric; keep the first C whose score is strictly
  higher than the best so far (start 0).
- Refit on train+val with that C, score test.

The script fits cuML's ``LogisticRegression(max_iter=1000, tol=1e-12, linesearch_max_iter=50)``
(L-BFGS, L2, intercept, softmax for > 2 classes and sigmoid for 2). cuML averages the loss and
divides the L2 strength 1/C by the number of samples (``penalty_normalized``), which is sklearn's
objective divided by n: sklearn's ``LogisticRegression(C, solver="lbfgs")`` minimises the same
function and is used here (cuML needs a GPU). The two solvers stop by different rules; both run to
tol 1e-12 or 1000 iterations. VOC2007: one binary fit per class, scored by its decision values.
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np

from harness.errors import DataError

from benchmarks.transfer import metrics as M


def c_grid(wd_from: float = -6.0, wd_to: float = 5.0, steps: int = 45) -> list[float]:
    """C = 1 / wd for each weight decay of the official float32 ``torch.logspace``."""
    import torch

    return [1.0 / wd.item() for wd in torch.logspace(wd_from, wd_to, steps)]


ZERO_VARIANCE = ("refuse", "unit")


def standardise(fit_on: np.ndarray, *others: np.ndarray, source: str = "features",
                zero_variance: str = "refuse", where: str = "transfer") -> list[np.ndarray]:
    """(x - mean) / std with the statistics of ``fit_on``; every array returned, ``fit_on`` first.
    A dimension constant over ``fit_on`` (a dead ReLU channel) has std 0: the official script divides
    by it (NaN features), refused here (``zero_variance: refuse``); ``unit`` divides it by 1 instead, as
    scikit-learn's StandardScaler does (the centred dimension is then 0 everywhere in ``fit_on``)."""
    mean = np.mean(fit_on, axis=0, keepdims=True)
    std = np.std(fit_on, axis=0, keepdims=True)
    if np.any(std == 0):
        if zero_variance != "unit":
            raise DataError(f"{where}: {int(np.sum(std == 0))} feature dimension(s) are constant over the {source} "
                            "(dead channels): the official standardisation divides by their zero std (NaN "
                            "features); set zero_variance=unit (scikit-learn StandardScaler's guard: those "
                            "dimensions divided by 1), standardize=false, or use more images")
        std = np.where(std == 0, 1.0, std)
    return [(x - mean) / std for x in (fit_on, *others)]


@dataclass
class Scored:
    score: float
    predictions: np.ndarray  # (N,) class per image, or (N, C) decision values for mAP


def _classifier(c: float, max_iter: int, tol: float):
    from sklearn.linear_model import LogisticRegression

    return LogisticRegression(C=c, solver="lbfgs", max_iter=max_iter, tol=tol)


def fit_and_score(x_fit, y_fit, x_eval, y_eval, c: float, metric: str, *, max_iter: int = 1000,
                  tol: float = 1e-12, curve: str = "sklearn") -> Scored:
    """One fit with C on (x_fit, y_fit), scored on (x_eval, y_eval) by ``metric``."""
    from sklearn.exceptions import ConvergenceWarning

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        if metric == "mAP":
            values = np.stack([_classifier(c, max_iter, tol).fit(x_fit, y_fit[:, k]).decision_function(x_eval)
                               for k in range(y_fit.shape[1])], axis=1)
            return Scored(float(M.mean_ap(values, y_eval, curve=curve)[0]), values)
        pred = _classifier(c, max_iter, tol).fit(x_fit, y_fit).predict(x_eval)
    score = M.top1(y_eval, pred) if metric == "top1" else M.mean_per_class(y_eval, pred)
    return Scored(score, pred)


@dataclass
class Selection:
    c: float | None
    val_score: float
    curve: list[tuple[float, float]]  # (C, val score) for every C tried


def select_c(x_train, y_train, x_val, y_val, grid: list[float], metric: str, **kw) -> Selection:
    """The official sweep: the first C whose val score beats every earlier one (strictly, from 0)."""
    best, best_c, curve = 0.0, None, []
    for c in grid:
        s = fit_and_score(x_train, y_train, x_val, y_val, c, metric, **kw).score
        curve.append((c, s))
        if s > best:
            best, best_c = s, c
    return Selection(best_c, best, curve)
