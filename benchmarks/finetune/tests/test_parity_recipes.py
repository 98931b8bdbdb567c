"""Parity of the DeiT-style recipes (iBOT's transfer and semi-supervised fine-tuning) and of SynCLR's
with the official code, against the fixtures of reference/make_recipe_fixtures.py: the per-epoch
schedule of eval_cls.py's loop, RASampler's index order per process, MAE's per-iteration schedule,
SynCLR's eval transform; and the presets that state those recipes."""
from __future__ import annotations

import numpy as np
import pytest

from benchmarks.finetune import sampler, schedules
from benchmarks.finetune.reference.fixture_files import load_json

DEIT = load_json("deit_schedules.json")["commands"]
RA = load_json("ra_sampler.json")["cases"]
SYNCLR = load_json("synclr_schedules.json")

# preset -> the run.sh command it states (README's ViT-S lrs for the _vits16 iNat presets)
TRANSFER = {"ibot_transfer_cifar100": "cifar_cls", "ibot_transfer_cifar10": "cifar10_cls",
            "ibot_transfer_flowers": "flwrs_cls", "ibot_transfer_cars": "cars_cls",
            "ibot_transfer_inat18": "inat_cls", "ibot_transfer_inat19": "inat19_cls",
            "ibot_transfer_inat18_vits16": "inat_cls_vit_small", "ibot_transfer_inat19_vits16": "inat19_cls_vit_small"}


def _config(preset):
    from benchmarks.finetune.protocol import FinetuneProtocol

    return FinetuneProtocol.Config(**FinetuneProtocol.PRESETS[preset])


@pytest.mark.parametrize("command", sorted(DEIT))
def test_per_epoch_schedule_is_eval_cls_loop(command):
    row = DEIT[command]
    got = schedules.per_epoch_lrs(row["lr"], row["min_lr"], row["warmup_lr"], row["epochs"], row["warmup_epochs"])
    want = np.asarray(row["epoch_lr"])
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=0)


def test_per_epoch_schedule_is_constant_within_an_epoch_and_differs_from_per_step():
    from benchmarks.finetune.train import official_cosine

    row = DEIT["short_warmup"]
    got = schedules.per_epoch_schedule(row["lr"], row["min_lr"], row["warmup_lr"], row["epochs"],
                                       row["warmup_epochs"], 4)
    assert got.shape == (row["epochs"] * 4,)
    np.testing.assert_allclose(got[::4], row["epoch_lr"], rtol=1e-12)
    assert np.all(got.reshape(-1, 4) == got.reshape(-1, 4)[:, :1])
    per_step = official_cosine(row["lr"], row["min_lr"], row["epochs"], 4, row["warmup_epochs"])
    assert np.abs(per_step - got).max() > 0.1 * row["lr"]  # the two recipes' schedules are not interchangeable


@pytest.mark.parametrize("case", range(len(RA)))
def test_ra_sampler_order_per_process(case):
    row = RA[case]
    assert len(row["agree"]) == 3  # iBOT's two copies and DeiT's samplers.py drew the same
    for rank in range(row["world"]):
        got = sampler.official_rank_order(row["n"], row["batch"], row["epoch"], rank, row["world"])
        if "ranks" in row:
            assert got == row["ranks"][rank]
        else:
            import hashlib
            import json

            assert len(got) == row["ranks_len"][rank] and got[:12] == row["ranks_head"][rank]
            assert hashlib.sha256(json.dumps(got).encode()).hexdigest() == row["ranks_sha256"][rank]


def test_ra_epoch_on_one_process_repeats_each_image_three_times_side_by_side():
    entries = sampler.epoch_entries(1000, 0)
    assert len(entries) == 768 and sampler.steps_per_epoch(1000, 64) == 12
    assert [r for _, r in entries[:6]] == [0, 1, 2, 0, 1, 2]
    assert entries[0][0] == entries[1][0] == entries[2][0] != entries[3][0]
    assert len({i for i, _ in entries}) == 256  # a third of the images, each three times


def test_repeated_copies_are_augmented_differently():
    import torch

    from benchmarks.finetune.data import TransformedImages

    class Noise:
        def __call__(self, _image):
            return torch.rand(3)

    class Images:
        def __len__(self):
            return 2

        def load_image(self, i):
            return None

    ds = TransformedImages(Images(), [0, 1], Noise(), seed=0)
    a, b, c = ds[(0, 0)][0], ds[(0, 1)][0], ds[0][0]
    assert not torch.equal(a, b) and torch.equal(a, c)


@pytest.mark.parametrize("loop", range(len(SYNCLR["loops"])))
def test_mae_schedule_is_synclr_adjust_learning_rate(loop):
    row = SYNCLR["loops"][loop]
    steps = row["loader_len"] // row["accum_iter"]
    got = schedules.mae_schedule(row["lr"], row["min_lr"], row["epochs"], row["warmup_epochs"], steps)
    np.testing.assert_allclose(got, row["step_lr"], rtol=1e-12, atol=1e-20)
    np.testing.assert_allclose(got * row["lr_scale_1"], row["step_lr_scaled"], rtol=1e-12, atol=1e-20)


def test_synclr_preset_is_evaluate_md():
    from benchmarks.finetune.data import eval_transform, mean_std
    from benchmarks.finetune.train import lr_schedule

    cfg = _config("synclr_vitb16")
    ev, loop = SYNCLR["eval_transform"], SYNCLR["loops"][0]
    assert cfg.lr_schedule == "mae" and cfg.peak_lr() == pytest.approx(loop["lr"], rel=1e-12)
    assert (cfg.epochs, cfg.warmup_epochs, cfg.min_lr) == (loop["epochs"], loop["warmup_epochs"], loop["min_lr"])
    assert mean_std(cfg) == (tuple(ev["mean"]), tuple(ev["std"]))
    resize = eval_transform(cfg).transforms[0]
    assert (resize.size, resize.interpolation.value, cfg.crop_pct) == (ev["resize"], ev["interpolation"],
                                                                      ev["crop_pct"])
    np.testing.assert_allclose(lr_schedule(cfg, 7), loop["step_lr"], rtol=1e-12, atol=1e-20)


@pytest.mark.parametrize("preset", sorted(TRANSFER) + ["ibot_semi_head", "ibot_semi_backbone"])
def test_deit_recipe_presets_state_the_official_schedule_and_sampler(preset):
    from benchmarks.finetune.train import lr_schedule

    row = DEIT[TRANSFER.get(preset, "imagenet_semi_cls")]
    cfg = _config(preset)
    assert cfg.lr_schedule == "per_epoch" and cfg.repeated_aug is row["repeated_aug"] is True
    assert cfg.batch_size == row["batch_size"] * row["gpus"]
    assert (cfg.epochs, cfg.warmup_epochs) == (row["epochs"], row["warmup_epochs"])
    assert cfg.peak_lr() == pytest.approx(row["lr"], rel=1e-12)
    assert (cfg.min_lr, cfg.warmup_lr) == (row["min_lr"], row["warmup_lr"])
    assert cfg.eval_interpolation == "bicubic" and cfg.layer_decay == 1.0
    np.testing.assert_allclose(lr_schedule(cfg, 3)[::3], row["epoch_lr"], rtol=1e-12)


def test_cars_preset_uses_the_official_head():
    cfg = _config("ibot_transfer_cars")
    assert cfg.head_outputs == "reader_official"
    assert _config("ibot_transfer_flowers").head_outputs == "classes"


@pytest.mark.parametrize("preset", ["ibot_transfer_cifar100", "ibot_semi_head", "ibot_vits16"])
def test_weight_decay_per_parameter_is_the_official_optimizers(preset):
    """eval_cls.py's timm ``create_optimizer`` decays pos_embed and cls_token (iBOT's ViT declares no
    ``no_weight_decay``); BEiT's ``get_parameter_groups`` does not (ibot_param_groups.json)."""
    from benchmarks.finetune.model import FinetuneClassifier
    from benchmarks.finetune.reference.fixture_files import project_name
    from benchmarks.finetune.train import build_optimizer
    from harness.models.backbone import create_backbone

    official = load_json("deit_schedules.json")["vit_small_weight_decay"]
    assert official["has_no_weight_decay"] is False
    cfg = _config(preset)
    import torch

    with torch.device("meta"):
        backbone = create_backbone("vit_small_patch16_224")
        model = FinetuneClassifier(backbone, 100, use_mean_pooling=False, init_scale=1.0, drop_path=0.1, seed=0)
    names = {id(p): n for n, p in model.named_parameters()}
    got = {names[id(p)]: g["weight_decay"] for g in build_optimizer(model, cfg).param_groups for p in g["params"]}
    want = {project_name(n): wd for n, wd in official["params"].items()}
    if preset == "ibot_vits16":  # BEiT's recipe: the no_weight_decay() names are not decayed
        assert got["backbone.pos_embed"] == got["backbone.cls_token"] == 0.0
        want.update({"backbone.pos_embed": 0.0, "backbone.cls_token": 0.0})
    assert got == want


def test_synclr_groups_are_mae_param_groups_lrd():
    """MAE's ``param_groups_lrd`` (SynCLR's util/lr_decay.py) and BEiT's groups the protocol builds give
    every parameter of ViT-B/16 the same lr scale and weight decay (only the group order differs)."""
    import torch

    from benchmarks.finetune.model import FinetuneClassifier
    from benchmarks.finetune.reference.fixture_files import project_name
    from benchmarks.finetune.train import build_optimizer
    from harness.models.backbone import create_backbone

    official = SYNCLR["param_groups"]
    cfg = _config("synclr_vitb16")
    assert official["global_pool"] is cfg.use_mean_pooling is False and official["layer_decay"] == cfg.layer_decay
    with torch.device("meta"):
        backbone = create_backbone("vit_base_patch16_224")
        model = FinetuneClassifier(backbone, 1000, use_mean_pooling=False, init_scale=0.001, drop_path=0.1, seed=0)
    names = {id(p): n for n, p in model.named_parameters()}
    got = {names[id(p)]: (g["lr_scale"], g["weight_decay"])
           for g in build_optimizer(model, cfg).param_groups for p in g["params"]}
    want = {project_name(n): tuple(v) for n, v in official["params"].items()}
    assert got.keys() == want.keys()
    for name, (scale, wd) in want.items():
        assert got[name][0] == pytest.approx(scale, rel=1e-12) and got[name][1] == wd, name
