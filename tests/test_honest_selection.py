"""Honest selection beside the papers' rule: the linear probe with ``selection_holdout`` reports the
(epoch, lr) chosen on a holdout carved from the training split and the last epoch's number, the
chosen head's training loss and accuracy; logistic regression the lambda chosen on the holdout.
Off (every preset), requests and fingerprints are what they were; the leaderboard says which
selection each column uses."""
from __future__ import annotations

import numpy as np
import pytest

from harness.data.holdout import carve
from harness.errors import ConfigError
from harness.models.handle import ModelHandle
from harness.protocol_info import variant_text
from harness.registry import PROTOCOLS

LINEAR = {"dataset": "imagefolder", "cached_features": True, "epochs": 3, "resize": 32, "crop": 32,
          "progress": False}


def test_carve_holds_out_a_fraction_of_every_class_by_seed():
    labels = np.repeat(np.arange(4), [10, 5, 2, 1])
    kept, held = carve(labels, 0.2, seed=3)
    assert sorted(np.concatenate([kept, held]).tolist()) == list(range(len(labels)))
    assert np.bincount(labels[held], minlength=4).tolist() == [2, 1, 1, 0]  # >= 1, < n; a lone image stays
    assert np.array_equal(carve(labels, 0.2, seed=3)[1], held)
    assert not np.array_equal(carve(labels, 0.2, seed=4)[1], held)
    with pytest.raises(ConfigError, match="selection_holdout"):
        carve(labels, 1.0, seed=0)


def test_holdout_off_leaves_the_request_and_fingerprint_as_they_were():
    cls = PROTOCOLS.get("linear")
    off = cls.from_preset("synth", LINEAR)
    explicit_off = cls.from_preset("synth", {**LINEAR, "selection_holdout": 0.0, "selection_seed": 0})
    on = cls.from_preset("synth", {**LINEAR, "selection_holdout": 0.2})
    other_seed = cls.from_preset("synth", {**LINEAR, "selection_holdout": 0.2, "selection_seed": 1})
    assert off.request_hash() == explicit_off.request_hash() and off.fingerprint() == explicit_off.fingerprint()
    assert len({off.fingerprint(), on.fingerprint(), other_seed.fingerprint()}) == 3


def test_linear_reports_holdout_best_and_last_epoch_beside_the_papers_rule(synth_tiny, isolated_home):
    from harness.per_image import decode_array

    model = ModelHandle.random_init("vit_cpu_tiny", seed=0)
    cls = PROTOCOLS.get("linear")
    [alone] = cls.from_preset("synth", LINEAR).run(model, synth_tiny / "imagenet")
    proto = cls.from_preset("synth", {**LINEAR, "selection_holdout": 0.25, "selection_seed": 1})
    paper, best, last = proto.run(model, synth_tiny / "imagenet")
    # the papers' number is the one it was: the holdout trains a second grid beside it
    assert paper.metrics == alone.metrics and paper.variant == alone.variant
    assert paper.params["selection"] == "eval-split best" and "last_epoch_top1" in paper.params
    assert best.variant["selection"] == "holdout best" and last.variant["selection"] == "holdout last epoch"
    assert last.params["chosen_epoch"] == 3
    assert best.params["n_selection_fit"] + best.params["n_selection_holdout"] == paper.params["n_train"]
    for r in (paper, best, last):
        assert 0.0 <= r.params["train_top1"] <= 100.0 and r.params["train_loss"] > 0
        flags = decode_array(r.per_image["hits"])
        assert flags.shape[0] == r.params["n_val"]
        assert abs(100.0 * flags[:, 0].mean() - r.metrics["top1"]) < 1e-9  # the interval's data is the number's


def test_leaderboard_headers_say_which_selection_a_column_uses():
    assert variant_text("linear", {"recipe": "dino"}) == "dino [eval-split best]"
    assert variant_text("linear", {"recipe": "dino", "selection": "holdout best"}) == "dino [holdout best]"
    assert variant_text("knn", {"k": 20, "feature": "cls"}) == "k=20 cls"


def test_logreg_reports_the_lambda_a_holdout_chooses(synth_tiny, isolated_home, logreg_fits_in_one_child):
    pytest.importorskip("cyanure")
    model = ModelHandle.random_init("vit_cpu_tiny", seed=0)
    cls = PROTOCOLS.get("logreg")
    settings = {"dataset": "imagefolder", "progress": False, "cache": False}
    swept = cls.from_preset("synth", settings).run(model, synth_tiny / "imagenet")
    *again, honest = cls.from_preset("synth", {**settings, "selection_holdout": 0.25}).run(
        model, synth_tiny / "imagenet")
    assert [r.metrics for r in again] == [r.metrics for r in swept]
    assert honest.variant == {"selection": "holdout best", "feature": "cls"}
    by_lambda = honest.params["selection_top1_by_lambda"]
    assert set(by_lambda) == {"0.01", "0.1", "1"}
    chosen = honest.params["chosen_lambda"]
    assert by_lambda[f"{chosen:g}"] == max(by_lambda.values())
    [same] = [r for r in swept if r.variant["lambda"] == chosen]
    assert honest.metrics == same.metrics
    assert variant_text("logreg", honest.variant) == "[holdout best] cls"
