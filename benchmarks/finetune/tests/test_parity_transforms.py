"""Train and eval transforms against iBOT's official ``run_class_finetuning.build_transform``
(fixtures/ibot_transforms.json): the README's ImageNet flags at 224 px (RandomResizedCrop bicubic,
flip, RandAugment ``rand-m9-mstd0.5-inc1``, random erasing 0.25, ImageNet mean / std; eval
Resize(256) + CenterCrop(224)) and the 32 px branch (RandomCrop with padding 4, no resize at
eval), each applied to the same test images with python's, numpy's and torch's generators
seeded as the official run was. The project seeds the same three generators per sample
(``data.TransformedImages``), so equal seeds must give equal tensors.
"""
from __future__ import annotations

import random

import numpy as np
import pytest
import torch

from benchmarks.finetune.reference.fixture_files import load_json, synthetic_photo, tensor_digest

CASES = load_json("ibot_transforms.json")["cases"]
SETTINGS = {"imagenet_224": dict(input_size=224, imagenet_default_mean_and_std=True),
            "small_32": dict(input_size=32, imagenet_default_mean_and_std=True)}


def _project_transforms(case):
    from benchmarks.finetune import data
    from benchmarks.finetune.config import FinetuneConfig

    cfg = FinetuneConfig(**SETTINGS[case])
    return data.train_transform(cfg), data.eval_transform(cfg)


def _close(got: dict, want: dict, what: str):
    assert got["shape"] == want["shape"], what
    for key in ("sum", "abs_sum"):
        assert got[key] == pytest.approx(want[key], rel=1e-6, abs=1e-3), f"{what}: {key}"
    np.testing.assert_allclose(got["channel_mean"], want["channel_mean"], atol=1e-6, err_msg=what)
    np.testing.assert_allclose(got["probes"], want["probes"], atol=1e-5, err_msg=what)


@pytest.mark.parametrize("case", list(SETTINGS))
def test_seeded_transforms_match_the_official(case):
    train, evaluation = _project_transforms(case)
    compared = 0
    for row in CASES[case]["images"]:
        for split, transform in (("train", train), ("eval", evaluation)):
            if "skipped" in row[split]:
                continue
            random.seed(row["seed"])
            np.random.seed(row["seed"])
            torch.manual_seed(row["seed"])
            _close(tensor_digest(transform(synthetic_photo(row["seed"]))), row[split],
                   f"{case} {split} seed {row['seed']}")
            compared += 1
    assert compared >= 20
