"""experiments/positive_similarity.py: do a backbone's features separate a method's positives?"""
import pytest
import torch

from experiments.positive_similarity import caption_crops, model_stats, positive_stats
from harness.config import load_config
from harness.errors import DataError
from harness.models.handle import ModelHandle
from methods.shared import MultiCropConfig


def test_positive_stats_find_identical_positives_and_miss_shuffled_ones():
    g = torch.Generator().manual_seed(0)
    anchor = torch.randn(16, 8, generator=g)
    shuffled = anchor.roll(1, dims=0)  # every row's "positive" is another row's copy
    stats = positive_stats(anchor, anchor.clone(), shuffled)
    assert stats["instance_pos"] == pytest.approx(1.0)
    assert stats["instance_top1"] == pytest.approx(100.0)
    assert stats["caption_top1"] == pytest.approx(0.0)
    assert stats["caption_pos"] < 0.5 and abs(stats["neg"]) < 0.2


def test_positive_stats_ignore_an_offset_shared_by_all_features():
    g = torch.Generator().manual_seed(1)
    anchor, other = torch.randn(16, 8, generator=g), torch.randn(16, 8, generator=g)
    plain = positive_stats(anchor, other, other)
    shifted = positive_stats(anchor + 50.0, other + 50.0, other + 50.0)
    assert shifted == pytest.approx(plain, abs=1e-4)


def test_caption_crops_and_stats_on_synthscenes(synth_tiny):
    crops = MultiCropConfig(**load_config("methods/synclr_cpu.yaml")["method"]["crops"])
    views = caption_crops(synth_tiny, crops, groups=4)
    assert [tuple(v.shape) for v in views] == [(4, 3, 64, 64)] * 3
    rows = model_stats(ModelHandle.random_init("vit_cpu_tiny", seed=0), views)
    assert [r["feature"] for r in rows] == ["cls", "avgpool"]
    assert all(0.0 <= r["instance_top1"] <= 100.0 and -1.0 <= r["neg"] <= 1.0 for r in rows)


def test_caption_crops_refuse_more_groups_than_the_data_has(synth_tiny):
    crops = MultiCropConfig(**load_config("methods/synclr_cpu.yaml")["method"]["crops"])
    with pytest.raises(DataError, match="caption groups with 2 renders"):
        caption_crops(synth_tiny, crops, groups=1000)
