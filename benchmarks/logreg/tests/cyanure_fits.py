"""The current cyanure's fits of the stored features, for test_logreg.py beside it. A module of its own
so that the spawned child that runs them imports numpy, cyanure and the solver, not the test module's
torch and harness imports (two seconds of a fresh interpreter's start)."""
from __future__ import annotations

import numpy as np


def fit_every_set(npz: str, sets: dict[str, list[float]]) -> dict:
    """Every set, every lambda: {set name: [Fit per lambda]}."""
    from benchmarks.logreg.solver import logistic_regression

    z = np.load(npz)
    return {name: [logistic_regression(z[f"{name}_train_x"], z[f"{name}_train_y"], z[f"{name}_test_x"], lambd,
                                       threads=1) for lambd in lambdas]
            for name, lambdas in sets.items()}
