"""experiments.per_image_cost builds confusion blocks of the stated shape and sparsity and prints
their size and bootstrap time."""
from __future__ import annotations

import numpy as np

from experiments import per_image_cost


def test_sparse_matrices_have_the_stated_classes_per_image():
    m = per_image_cost.sparse_matrices(5, 10, 11, 3)
    assert m.shape == (5, 10, 11)
    assert ((m.sum(2) > 0).sum(1) == 3).all() and ((m > 0).sum((1, 2)) == 12).all()
    assert np.array_equal(m, per_image_cost.sparse_matrices(5, 10, 11, 3))  # seeded


def test_it_prints_size_and_time(capsys, monkeypatch):
    monkeypatch.setitem(per_image_cost.SETS, "tiny", (20, 6, 7, 2))
    assert per_image_cost.main(["--sets", "tiny"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("tiny: 20 images x 6 x 7: block ") and "1000 resamples" in out
