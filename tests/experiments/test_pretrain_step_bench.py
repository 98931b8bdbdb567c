"""experiments/pretrain_step_bench.py: a preset variant through `--set`, and the anchor of its shape."""
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


def test_the_anchor_takes_the_backbone_overrides(synth_tiny):
    row = bench_method("dino", synth_tiny, steps=1, warmup=0, overrides={"batch_size": 8, "num_workers": 0},
                       settings=["backbone.embed_dim=32", "backbone.depth=2"])
    assert (row["anchor_shape"]["embed_dim"], row["anchor_shape"]["depth"]) == (32, 2)  # the preset: 64, 3
    assert row["anchor_shape"]["patch_size"] == 8  # kept from vit_cpu_tiny
