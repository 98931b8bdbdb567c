"""Fractions of the training split that could give a misleading number: one below a single image
is refused with one error line and no record, and generated subsets hold floor(N / d) images."""
from __future__ import annotations

import pytest

from harness.cli import main


def test_dense_nn_fraction_below_one_image_is_refused(isolated_home, synth_tiny, capsys):
    """24 training scenes: 1/64 would be floor(24 / 64) = 0 images; rounding up to one image
    reported 1/64 and 1/128 as two columns of one measurement."""
    rc = main(["--threads", "1", "eval", "--protocol", "dense_nn", "--preset", "cribo", "--dataset", "voc",
               "--data-root", str(synth_tiny), "--random-init", "vit_cpu_tiny",
               "--set", "fractions=[1/8, 1/64]", "--set", "seeds=[42]", "--set", "progress=false"])
    err = capsys.readouterr().err
    assert rc == 2 and err.startswith("error: ") and err.count("\n") == 1, err
    assert "1/64" in err and "24" in err and "less than one image" in err
    runs = isolated_home / "results" / "runs"
    assert not runs.exists() or not any(runs.iterdir())  # no record


def test_dense_nn_generated_subsets_are_floor_n_over_d():
    from benchmarks.dense_nn.subsets import generate_subsets, plan_subsets

    stems = [f"s{i:03d}" for i in range(130)]
    lists = generate_subsets(stems, [8, 64, 128], seed=42)
    assert {d: len(v) for d, v in lists.items()} == {8: 16, 64: 2, 128: 1}
    with pytest.raises(Exception, match="1/256 of 130"):
        plan_subsets(stems, [], ["1/1", "1/256"], [42], dataset="voc")
