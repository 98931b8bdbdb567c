"""experiments/pretrain_step_bench.py: a preset variant through `--set`."""
import pytest

from experiments.pretrain_step_bench import bench_method
from harness.errors import ConfigError


def test_set_benchmarks_a_variant_of_the_preset(synth_tiny):
    small = {"batch_size": 8, "num_workers": 0}
    row = bench_method("dino", synth_tiny, steps=1, warmup=0, overrides=small,
                       settings=["method.crops.local_crops_number=2"])
    assert row["crops"] == "2x64 + 2x32"  # the preset has 4 local crops
    assert row["step_s"] > 0 and row["anchor_s"] > 0 and row["ratio"] == row["step_s"] / row["anchor_s"]


def test_set_refuses_an_unknown_setting(synth_tiny):
    with pytest.raises(ConfigError):
        bench_method("dino", synth_tiny, steps=1, warmup=0, overrides={"batch_size": 8, "num_workers": 0},
                     settings=["method.no_such_setting=1"])
