"""The logistic regression of iBOT's eval_logistic_regression.py ``logistic_regression``, on
cyanure's current estimators API.

The official call (cyanure 0.2x): ``MultiClassifier(loss="multiclass-logistic", penalty="l2",
fit_intercept=False).fit(X, y, it0=10, lambd=lambd, lambd2=lambd, tol=1e-3,
solver="catalyst-miso", restart=False, seed=0, max_epochs=100)`` then ``score`` (accuracy). Its
1.x spelling, one argument each: ``Classifier(loss="multiclass-logistic", penalty="l2",
fit_intercept=False, lambda_1=lambd, lambda_2=lambd, tol=1e-3, solver="catalyst-miso",
random_state=0, max_iter=100, duality_gap_interval=10, warm_start=False)``. lambda is used as
given: the official script does not scale it by the number of images.
benchmarks/logreg/fixtures/logreg_cyanure022.json holds the official function's accuracy per lambda under
cyanure-openblas 0.22.post1; benchmarks/logreg/tests/test_logreg.py checks this module against it.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from harness.errors import ConfigError

MISSING = ("logreg needs cyanure (the official script's solver), which is not installed: "
           "pip install 'ssl-bench[logreg]' (or pip install 'cyanure>=1.2')")


def require_cyanure() -> None:
    """One ConfigError saying how to install cyanure where it is missing (found without importing
    it: the fits run in a child process, see :func:`fit_sweep`)."""
    import importlib.util

    try:
        found = importlib.util.find_spec("cyanure.estimators") is not None
    except (ImportError, ValueError):
        found = False
    if not found:
        raise ConfigError(MISSING)


def _classifier():
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
    Classifier = _classifier()
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


def _fit_files(folder: str, lambdas: list[float], kw: dict) -> list[Fit]:
    """In the child: read the arrays :func:`fit_sweep` wrote, fit every lambda."""
    from pathlib import Path

    d = Path(folder)
    train_x, train_y, test_x = (np.load(d / f"{n}.npy") for n in ("train_x", "train_y", "test_x"))
    return [logistic_regression(train_x, train_y, test_x, lambd, **kw) for lambd in lambdas]


def fit_sweep(train_x: np.ndarray, train_y: np.ndarray, test_x: np.ndarray, lambdas: list[float], *,
              isolate: bool = True, **kw) -> list[Fit]:
    """:func:`logistic_regression` for each lambda. ``isolate``: in one spawned child process.

    Why a child: cyanure 1.2.2's fit can leave the calling process in a state where later torch
    training yields NaN (measured: tests/test_conformance.py's methods trained after a logreg
    conformance run in the same process, and a tiny fit of 24 x 192 features followed by an iBOT
    training step; not every time). The arrays go through a temporary folder, not a pipe."""
    if not isolate:
        return [logistic_regression(train_x, train_y, test_x, lambd, **kw) for lambd in lambdas]
    import multiprocessing
    import tempfile
    from concurrent.futures import ProcessPoolExecutor
    from pathlib import Path

    with tempfile.TemporaryDirectory(prefix="ssl-bench-logreg-") as tmp:
        for name, a in (("train_x", train_x), ("train_y", train_y), ("test_x", test_x)):
            np.save(Path(tmp) / f"{name}.npy", np.ascontiguousarray(a))
        with ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn")) as pool:
            return pool.submit(_fit_files, tmp, list(lambdas), kw).result()
