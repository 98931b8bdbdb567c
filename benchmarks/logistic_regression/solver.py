"""The logistic regression of iBOT's eval_logistic_regression.py ``logistic_regression``, on
cyanure's current estimators API.

The official call (cyanure 0.2x): ``MultiClassifier(loss="multiclass-logistic", penalty="l2",
fit_intercept=False).fit(X, y, it0=10, lambd=lambd, lambd2=lambd, tol=1e-3,
solver="catalyst-miso", restart=False, seed=0, max_epochs=100)`` then ``score`` (accuracy). Its
1.x spelling, one argument each: ``Classifier(loss="multiclass-logistic", penalty="l2",
fit_intercept=False, lambda_1=lambd, lambda_2=lambd, tol=1e-3, solver="catalyst-miso",
random_state=0, max_iter=100, duality_gap_interval=10, warm_start=False)``. lambda is used as
given: the official script does not scale it by the number of images.
tests/fixtures/logreg_cyanure022.json holds the official function's accuracy per lambda under
cyanure-openblas 0.22.post1; tests/test_logreg.py checks this module against it.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from harness.errors import ConfigError

MISSING = ("logreg needs cyanure (the official script's solver), which is not installed: "
           "pip install 'ssl-bench[logreg]' (or pip install 'cyanure>=1.2')")


def require_cyanure():
    """cyanure's Classifier, or one ConfigError saying how to install it."""
    try:
        from cyanure.estimators import Classifier
    except ImportError:
        raise ConfigError(MISSING) from None
    return Classifier


@dataclass
class Fit:
    weights: np.ndarray  # (d, classes)
    predictions: np.ndarray  # (n_test,) predicted class per test image
    train_accuracy: float  # fraction
    epochs: int  # cyanure's reported passes (the last duality-gap check)


def logistic_regression(train_x: np.ndarray, train_y: np.ndarray, test_x: np.ndarray, lambd: float, *,
                        epochs: int = 100, it0: int = 10, tol: float = 1e-3, seed: int = 0,
                        threads: int = -1) -> Fit:
    """One lambda of the sweep: fit on train, predict test (argmax of X W, as cyanure's score)."""
    Classifier = require_cyanure()
    classes = np.unique(train_y)
    if len(classes) < 3:  # cyanure 1.x turns a two-class problem into a binary one, 0.2x did not
        raise ConfigError(f"logreg needs at least 3 classes (multiclass-logistic), found {len(classes)}")
    if not np.array_equal(classes, np.arange(len(classes))):
        raise ConfigError(f"train labels must be 0..C-1 with every class present, found {classes[:10]}...")
    clf = Classifier(loss="multiclass-logistic", penalty="l2", fit_intercept=False, lambda_1=float(lambd),
                     lambda_2=float(lambd), tol=tol, solver="catalyst-miso", random_state=seed, max_iter=epochs,
                     duality_gap_interval=it0, warm_start=False, verbose=False, n_threads=threads)
    clf.fit(train_x, train_y)
    pred = np.asarray(clf.predict(test_x)).astype(np.int64)
    train_acc = float(np.mean(np.asarray(clf.predict(train_x)) == train_y))
    n_iter = getattr(clf, "n_iter_", None)
    epochs_run = int(np.max(n_iter)) if n_iter is not None and np.size(n_iter) else -1
    return Fit(np.asarray(clf.coef_), pred, train_acc, epochs_run)
