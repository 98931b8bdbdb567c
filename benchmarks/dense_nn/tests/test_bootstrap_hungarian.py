"""Dense NN under Hungarian matching (open-hummingbird-eval's metric) keeps each image's confusion
matrix: on the whole set it gives back compute_miou's number to the last bit, and every resample
matches the classes anew on its own summed matrix, as the protocol matches the whole set."""
from __future__ import annotations

import numpy as np
import pytest

from benchmarks.dense_nn.metric import ConfusionMatrix, compute_miou
from harness.per_image import read_per_image
from harness.results import bootstrap


def _images(n: int, classes: int, seed: int):
    """A prediction with its labels permuted (what a Hungarian matching undoes), right ~70%."""
    rng = np.random.default_rng(seed)
    perm = rng.permutation(classes + 1)
    out = []
    for i in range(n):
        gt = rng.integers(0, classes - 1, (10, 12))  # the last class never occurs
        gt[0, :] = 255
        pred = np.where(rng.random(gt.shape) < 0.7, perm[np.where(gt == 255, 0, gt)], rng.integers(0, classes + 1,
                                                                                                   gt.shape))
        pred[gt == 255] = 0
        out.append((gt, pred))
    out.append((np.full((3, 3), 255), np.zeros((3, 3), dtype=np.int64)))  # an image without labels
    return out


def _matrix(images, classes: int, keep: bool = True) -> ConfusionMatrix:
    cm = ConfusionMatrix(classes, classes + 1, keep_image_matrices=keep)
    for gt, pred in images:
        cm.update(gt, pred)
    return cm


@pytest.mark.parametrize("absent,ignored", [(False, False), (True, True)])
def test_the_matrices_give_back_the_hungarian_miou_exactly(absent, ignored):
    cm = _matrix(_images(30, 6, 0), 6)
    stats = read_per_image(cm.confusion_block(count_absent_classes=absent, count_ignored_class=ignored))
    want = compute_miou(cm.matrix, hungarian=True, count_absent_classes=absent, count_ignored_class=ignored)
    plain = compute_miou(cm.matrix, count_absent_classes=absent, count_ignored_class=ignored)
    assert want.miou > plain.miou + 0.2  # the matching matters here
    ones = np.ones((1, stats.images))
    assert stats.images == 31 and stats.metric_of_weights(ones, "mIoU")[0] == 100.0 * want.miou
    assert stats.metric_of_weights(ones, "pixel_accuracy")[0] == 100.0 * want.pixel_accuracy


def test_a_resample_is_matched_on_its_own_summed_matrix():
    images = _images(8, 5, 1)
    stats = read_per_image(_matrix(images, 5).confusion_block(count_absent_classes=False, count_ignored_class=False))
    weights = np.array([[3, 0, 0, 1, 0, 2, 0, 2, 1]])
    again = _matrix([im for im, w in zip(images, weights[0]) for _ in range(w)], 5, keep=False)
    assert stats.metric_of_weights(weights, "mIoU")[0] == 100.0 * compute_miou(again.matrix, hungarian=True).miou


def test_the_interval_holds_the_number_and_the_seed_fixes_it():
    cm = _matrix(_images(40, 6, 2), 6)
    stats = read_per_image(cm.confusion_block(count_absent_classes=False, count_ignored_class=False))
    point = 100.0 * compute_miou(cm.matrix, hungarian=True).miou
    a = bootstrap.intervals(stats, ["mIoU"], resamples=200)["mIoU"]
    assert a.low < point < a.high and a == bootstrap.intervals(stats, ["mIoU"], resamples=200)["mIoU"]
    assert a.method.startswith("bootstrap over 41 images")


def test_matrices_are_kept_only_when_asked():
    cm = _matrix(_images(3, 4, 0), 4, keep=False)
    assert cm.image_matrices is None
    with pytest.raises(ValueError, match="not kept"):
        cm.confusion_block(count_absent_classes=False, count_ignored_class=False)
