"""The ImageNet presets against the official parser: every setting of ``ibot_vits16``,
``ibot_vitb16`` and ``ibot_vitl16`` that has an official flag of the same name equals what
``run_class_finetuning.get_args()`` gives for ``run.sh imagenet_cls`` followed by the README's
command (fixtures/ibot_param_groups.json, ``official_args``; the README launches 8 GPUs)."""
from __future__ import annotations

import dataclasses

import pytest

from benchmarks.finetune.reference.fixture_files import load_json

PRESETS = {"vit_small": "ibot_vits16", "vit_base": "ibot_vitb16", "vit_large": "ibot_vitl16"}
README_GPUS = 8
# how a run executes, not what it computes (the protocol's EXECUTION_SETTINGS, and the seed a
# run takes from its own settings): the official values are the 8-GPU launch's
# run_class_finetuning.py parses --warmup_lr (1e-6) and never reads it (its warm-up starts at 0); the
# project's warmup_lr is the per_epoch schedule's start only
NOT_COMPARED = {"num_workers", "device", "seed", "warmup_lr"}


def _config(preset):
    from benchmarks.finetune.protocol import FinetuneProtocol

    return FinetuneProtocol.Config(**FinetuneProtocol.PRESETS[preset])


@pytest.mark.parametrize("arch", list(PRESETS))
def test_preset_settings_are_the_official_arguments(arch):
    from benchmarks.finetune.config import EXECUTION_SETTINGS

    official = load_json("ibot_param_groups.json")["models"][arch]["official_args"]
    cfg = _config(PRESETS[arch])
    shared = [f.name for f in dataclasses.fields(cfg) if f.name in official]
    compared = [n for n in shared if n not in NOT_COMPARED | set(EXECUTION_SETTINGS) | {"batch_size"}]
    assert len(compared) >= 25, compared
    differ = {n: (getattr(cfg, n), official[n]) for n in compared if getattr(cfg, n) != official[n]}
    assert not differ, f"{PRESETS[arch]} differs from the official arguments (preset, official): {differ}"


@pytest.mark.parametrize("arch", list(PRESETS))
def test_effective_batch_is_the_readme_launch(arch):
    official = load_json("ibot_param_groups.json")["models"][arch]["official_args"]
    cfg = _config(PRESETS[arch])
    assert cfg.batch_size == official["batch_size"] * official["update_freq"] * README_GPUS == 1024
