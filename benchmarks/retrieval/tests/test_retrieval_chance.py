"""The retrieval protocols' chance rows: the exact expected AP of a uniformly random ranking
(benchmarks/retrieval/chance.py), checked against every ranking of small cases and against random
rankings scored by the protocols' own AP code."""
from __future__ import annotations

import itertools
from math import comb

import numpy as np
import pytest

from benchmarks.retrieval.chance import expected_random_ap
from benchmarks.retrieval.copy_detection import CopyDetection
from benchmarks.retrieval.holidays_ap import holidays_ap
from benchmarks.retrieval.image_retrieval import ImageRetrieval
from benchmarks.retrieval.revisitop import average_precision, query_ap
from benchmarks.retrieval.synthetic import generate


@pytest.mark.parametrize("n, r, cutoff", [(1, 1, None), (4, 2, None), (6, 3, None), (7, 1, None), (7, 3, 4),
                                          (5, 5, None), (6, 2, 1)])
def test_expected_ap_is_the_mean_over_every_placement(n, r, cutoff):
    placements = list(itertools.combinations(range(n), r))
    assert len(placements) == comb(n, r)
    if cutoff is None:
        exact = np.mean([average_precision(np.array(p), r) for p in placements])
    else:
        exact = np.mean([holidays_ap([x for x in p if x < cutoff], r) for p in placements])
    assert expected_random_ap(n, r, cutoff=cutoff) == pytest.approx(exact, rel=1e-10, abs=1e-12)


def test_junk_is_left_out_as_the_ranking_ap_leaves_it_out():
    rng = np.random.default_rng(0)
    n, ok, junk = 40, np.array([3, 7, 11]), np.array([0, 5, 20, 21])
    draws = [query_ap(rng.permutation(n), ok, junk) for _ in range(20000)]
    expected = expected_random_ap(n - len(junk), len(ok))
    assert abs(np.mean(draws) - expected) < 4 * np.std(draws) / np.sqrt(len(draws))


def test_chance_rows_line_up_with_the_runs_and_sit_far_below_a_perfect_score(tmp_path):
    root = generate(tmp_path / "rsynth", preset="tiny", seed=0, progress=False)
    proto = ImageRetrieval.from_preset("synth", {"progress": False})
    (row,) = proto.chance_results(root)
    assert set(row.metrics) == {"mAP_E", "mAP_M", "mAP_H"}
    assert row.variant == {"multiscale": proto.cfg.multiscale, "imsize": proto.cfg.imsize}  # the run's column
    assert all(0.0 < v < 60.0 for v in row.metrics.values())
    (more,) = ImageRetrieval.from_preset("synth", {"progress": False, "distractors": "distractors"}
                                         ).chance_results(root)
    assert all(more.metrics[m] < row.metrics[m] for m in row.metrics)  # a larger bank: a lower guess
    (copy,) = CopyDetection.from_preset("synth", {"progress": False}).chance_results(root)
    assert 0.0 < copy.metrics["mAP_strong"] < 50.0 and copy.params["n_queries"] == 10
