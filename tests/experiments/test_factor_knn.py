"""experiments/factor_knn.py: object classes split into their texture and shape factors."""
import numpy as np
import pytest

from experiments.factor_knn import factor_knn, factor_labels
from harness.errors import DataError
from harness.models.handle import ModelHandle


def test_factor_labels_split_texture_and_shape():
    classes = ["checkered_disc", "dotted_cross", "striped_disc", "striped_square"]
    y = factor_labels(classes, [0, 1, 2, 3, 2])
    assert y["class"].tolist() == [0, 1, 2, 3, 2]
    # textures sorted: checkered, dotted, striped; shapes sorted: cross, disc, square
    assert y["texture"].tolist() == [0, 1, 2, 2, 2]
    assert y["shape"].tolist() == [1, 0, 1, 2, 1]


def test_factor_labels_refuse_other_class_names():
    with pytest.raises(DataError, match="<texture>_<shape>"):
        factor_labels(["n01440764", "striped_disc"], [0, 1])


def test_factor_knn_runs_on_synthscenes(synth_tiny, isolated_home):
    res = factor_knn(ModelHandle.random_init("vit_cpu_tiny", seed=0), synth_tiny)
    assert set(res) == {"class_top1", "texture_top1", "shape_top1"}
    assert all(0.0 <= v <= 100.0 for v in res.values())
    assert np.isfinite(list(res.values())).all()
