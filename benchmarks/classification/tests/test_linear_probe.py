"""Linear probe (benchmarks/classification/linear_probe.py; harness/probes/linear_probe.py, linear_grid.py,
linear_data.py): the batched lr grid equals independent SGD heads, best-head selection, the frozen
backbone stays bit-identical, seeded augmentation, feature layouts, presets and fingerprints."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torchvision.transforms as T
from PIL import Image
from torch import nn

from harness.probes.labelled_features import assemble
from harness.probes.linear_data import RandomResizedCropFlip, epoch_batches
from harness.probes.linear_grid import (GridSGD, LinearHeads, cosine_factor, evaluate_heads, select_best,
                                        train_grid)
from harness.probes.linear_probe import arch_feature_defaults
from benchmarks.classification.linear_probe import IBOT_BASE_LRS, LinearProbe
from harness.models.backbone import ARCHS
from harness.per_image import read_per_image
from harness.models.handle import ModelHandle
from image_folders import make_image_folder


@pytest.fixture
def folder(tmp_path, monkeypatch):
    monkeypatch.setenv("SSL_BENCH_HOME", str(tmp_path / "home"))
    return make_image_folder(tmp_path / "data", splits=(("train", 8), ("val", 4)))


def tiny_probe(**over) -> LinearProbe:
    values = {"dataset": "imagefolder", "crop": 32, "resize": 32, "epochs": 1, "batch_size": 8,
              "base_lrs": [0.01, 0.1], "progress": False, **over}
    return LinearProbe.from_preset("synth", values)


# ----------------------------------------------------------------------------- heads / trainer
@pytest.mark.parametrize("batchnorm", [False, True])
def test_batched_grid_equals_independent_sgd_heads(batchnorm):
    """The einsum grid with per-head lrs == one nn.Linear + torch.optim.SGD per lr (iBOT's
    eval_linear_multi.py / StableRep's per-lr groups), BN(affine=False) in front for StableRep."""
    torch.manual_seed(0)
    d, c, lrs, steps = 12, 5, [0.01, 0.3, 2.0], 12
    x = torch.randn(steps, 16, d) * 3 + 1
    y = torch.randint(0, c, (steps, 16))
    heads = LinearHeads(len(lrs), d, c, batchnorm=batchnorm, generator=torch.Generator().manual_seed(1))
    opt = GridSGD(heads, torch.tensor(lrs, dtype=torch.float64), momentum=0.9)
    refs, ref_opts, scheds = [], [], []
    for h, lr in enumerate(lrs):
        lin = nn.Linear(d, c)
        with torch.no_grad():
            lin.weight.copy_(heads.weight[h])
            lin.bias.zero_()
        m = nn.Sequential(nn.BatchNorm1d(d, affine=False, eps=1e-6), lin) if batchnorm else lin
        o = torch.optim.SGD(m.parameters(), lr=lr, momentum=0.9, weight_decay=0)
        refs.append(m), ref_opts.append(o), scheds.append(torch.optim.lr_scheduler.CosineAnnealingLR(o, steps))
    for t in range(steps):  # per-iteration cosine (StableRep)
        out = heads(x[t])
        loss = nn.functional.cross_entropy(out.permute(1, 2, 0), y[t].view(-1, 1).expand(-1, len(lrs)),
                                           reduction="none").mean(0).sum()
        opt.zero_grad()
        loss.backward()
        opt.step(cosine_factor(t, steps))
        for m, o, s in zip(refs, ref_opts, scheds):
            o.zero_grad()
            nn.functional.cross_entropy(m(x[t]), y[t]).backward()
            o.step()
            s.step()
    for h, m in enumerate(refs):
        lin = m[1] if batchnorm else m
        # einsum vs addmm rounding, grown over 12 steps at lr 2 (weights ~ 8): ~1e-5 relative
        torch.testing.assert_close(heads.weight[h], lin.weight, rtol=1e-4, atol=1e-4)
        torch.testing.assert_close(heads.bias[h], lin.bias, rtol=1e-4, atol=1e-4)
    heads.eval()
    for m in refs:
        m.eval()
    torch.testing.assert_close(heads(x[0]), torch.stack([m(x[0]) for m in refs]), rtol=1e-4, atol=1e-3)


def test_select_best_takes_the_first_maximum():
    top1 = [[50.0, 60.0, 60.0],
            [60.0, 70.0, 70.0],
            [70.0, 69.0, 10.0]]
    assert select_best(top1) == (1, 1)  # 70 first reached at eval 1 by head 1
    assert select_best([[float("nan"), 5.0]]) == (0, 1)


def _blobs(seed=0, n=240, d=8, c=4):
    g = torch.Generator().manual_seed(seed)
    centres = torch.randn(c, d, generator=g) * 4
    y = torch.randint(0, c, (n,), generator=g)
    x = centres[y] + torch.randn(n, d, generator=g)
    val_y = torch.arange(c).repeat(20)
    val_x = centres[val_y] + torch.randn(len(val_y), d, generator=g)

    def batches(epoch):
        for idx in epoch_batches(n, 32, seed=0, epoch=epoch, drop_last=False):
            yield x[idx], y[idx]

    return centres, batches, val_x, val_y


def test_grid_trainer_selects_the_planted_best_head():
    """Four heads that (at lr 1e-12) do not move: head 2 is planted as the nearest-centre
    classifier, the others are random; the trainer must report head 2."""
    centres, batches, val_x, val_y = _blobs()
    heads = LinearHeads(4, 8, 4, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        heads.weight[2] = centres
        heads.bias[2] = -0.5 * (centres ** 2).sum(1)
    opt = GridSGD(heads, torch.full((4,), 1e-12, dtype=torch.float64))
    hist = train_grid(heads, opt, batches, val_x, val_y, epochs=2, steps_per_epoch=8)
    e, h = select_best(hist.top1)
    assert (e, h) == (0, 2) and hist.top1[0][2] == max(hist.top1[0]) > 95.0
    assert sorted(hist.top1[0])[-2] < hist.top1[0][2]


def test_grid_trainer_lr_that_learns_beats_too_small_and_diverged():
    """A tiny lr cannot move N(0, 0.01) weights in 3 epochs; lr 1e38 overflows the weights
    to non-finite values (counted wrong); lr 0.1 learns."""
    _, batches, val_x, val_y = _blobs()
    heads = LinearHeads(3, 8, 4, generator=torch.Generator().manual_seed(1))
    opt = GridSGD(heads, torch.tensor([1e-7, 0.1, 1e38], dtype=torch.float64))
    hist = train_grid(heads, opt, batches, val_x, val_y, epochs=3, steps_per_epoch=8)
    e, h = select_best(hist.top1)
    assert h == 1 and hist.top1[e][1] > 90.0
    assert hist.top1[-1][0] < hist.top1[e][1]
    assert not torch.isfinite(heads.weight[2]).all() and hist.top1[-1][2] == 0.0
    assert hist.epochs == [1, 2, 3]


def test_eval_every_and_last_epoch():
    heads = LinearHeads(1, 3, 2)
    opt = GridSGD(heads, torch.tensor([0.1], dtype=torch.float64))
    x, y = torch.randn(10, 3), torch.randint(0, 2, (10,))
    hist = train_grid(heads, opt, lambda e: [(x, y)], x, y, epochs=12, steps_per_epoch=1, eval_every=5,
                      schedule="cosine_iter")
    assert hist.epochs == [5, 10, 12]  # StableRep: every 10th epoch; the last epoch is always evaluated


def test_evaluate_heads_counts_non_finite_logits_as_wrong():
    heads = LinearHeads(2, 2, 3)
    with torch.no_grad():
        heads.weight[1].fill_(float("nan"))
    x, y = torch.randn(6, 2), torch.zeros(6, dtype=torch.int64)
    top1, top5 = evaluate_heads(heads, x, y)
    assert top1[1] == 0 and top5[1] == 0


# ----------------------------------------------------------------------------- features
def test_feature_layouts():
    cls = torch.arange(2 * 4 * 3, dtype=torch.float32).view(2, 4, 3)  # (B, blocks, d)
    pm = -torch.arange(2 * 4 * 3, dtype=torch.float32).view(2, 4, 3)
    x = assemble(cls, pm, n_last_blocks=4, avgpool=False)
    assert torch.equal(x, cls.reshape(2, 12))  # DINO: cat of the last 4 CLS, oldest first
    x = assemble(cls, pm, n_last_blocks=1, avgpool=True, layout="concat")
    assert torch.equal(x, torch.cat([cls[:, -1], pm[:, -1]], 1))  # iBOT avgpool=2
    x = assemble(cls, pm, n_last_blocks=1, avgpool=True, layout="interleave")
    assert x[0].tolist() == [9.0, -9.0, 10.0, -10.0, 11.0, -11.0]  # DINO: cls_0, avg_0, cls_1, avg_1, ...
    x = assemble(cls, pm, n_last_blocks=2, avgpool=True)
    assert x.shape == (2, 9)


def test_arch_feature_defaults_follow_dino():
    def rule(arch):
        a = ARCHS[arch]
        return arch_feature_defaults(a["embed_dim"], a["depth"])

    assert rule("vit_small_patch16_224") == (4, False)
    assert rule("vit_small_patch8_224") == (4, False)
    assert rule("vit_base_patch16_224") == (1, True)
    assert rule("vit_base_patch8_224") == (1, True)
    assert rule("vit_large_patch16_224") == (1, True)
    assert rule("vit_cpu_tiny") == (3, False)  # capped at the depth


# ----------------------------------------------------------------------------- augmentation
def test_seeded_random_resized_crop_equals_torchvision():
    rrc = RandomResizedCropFlip(size=8)
    for seed in range(200):
        w, h = [(640, 480), (50, 300), (300, 50), (64, 64)][seed % 4]
        torch.manual_seed(seed)
        ref = T.RandomResizedCrop.get_params(Image.new("RGB", (w, h)), [0.08, 1.0], [3 / 4, 4 / 3])
        assert rrc.crop_box(w, h, torch.Generator().manual_seed(seed)) == ref


def test_augmentation_and_order_are_deterministic():
    img = Image.fromarray(np.random.default_rng(0).integers(0, 256, (40, 50, 3), dtype=np.uint8))
    rrc = RandomResizedCropFlip(size=16)
    a = rrc(img, torch.Generator().manual_seed(5))
    assert torch.equal(a, rrc(img, torch.Generator().manual_seed(5)))
    assert not torch.equal(a, rrc(img, torch.Generator().manual_seed(6)))
    b0 = epoch_batches(50, 8, seed=0, epoch=0, drop_last=False)
    assert all(torch.equal(p, q) for p, q in zip(b0, epoch_batches(50, 8, seed=0, epoch=0, drop_last=False)))
    assert not torch.equal(b0[0], epoch_batches(50, 8, seed=0, epoch=1, drop_last=False)[0])
    assert len(b0) == 7 and len(epoch_batches(50, 8, 0, 0, drop_last=True)) == 6


# ----------------------------------------------------------------------------- protocol
def test_frozen_backbone_is_bit_identical_after_a_probe_epoch(folder):
    model = ModelHandle.random_init("vit_cpu_tiny", seed=0, drop_path_rate=0.2)
    model.backbone.train()  # as a caller might leave it: the probe must still freeze it
    before = {k: v.clone() for k, v in model.backbone.state_dict().items()}
    res = tiny_probe().run(model, folder)[0]
    after = model.backbone.state_dict()
    assert before.keys() == after.keys()
    assert all(torch.equal(before[k], after[k]) for k in before)
    assert all(p.grad is None for p in model.backbone.parameters())
    assert model.backbone.training  # mode restored
    # eval mode inside: drop-path off, so a second run gives the same number
    again = tiny_probe().run(model, folder)[0]
    assert res.metrics == again.metrics and res.params["best_epoch"] == again.params["best_epoch"]


def test_probe_reports_best_lr_and_epoch(folder):
    model = ModelHandle.random_init("vit_cpu_tiny", seed=0)
    r = tiny_probe(epochs=2, base_lrs=[0.001, 0.1, 1.0]).run(model, folder)[0]
    assert r.variant == {"recipe": "synth"} and r.seed == 0
    assert set(r.metrics) == {"top1"}  # 3 classes: no top-5
    assert r.params["best_base_lr"] in (0.001, 0.1, 1.0) and r.params["best_epoch"] in (1, 2)
    assert r.params["best_lr"] == r.params["best_base_lr"] * 8 / 256
    assert r.metrics["top1"] == max(r.params["top1_by_base_lr"].values())
    assert r.params["n_last_blocks"] == 3 and r.params["feature_dim"] == 3 * 64


def test_workers_do_not_change_the_result(folder):
    model = ModelHandle.random_init("vit_cpu_tiny", seed=0)
    a = tiny_probe(num_workers=0).run(model, folder)[0]
    b = tiny_probe(num_workers=2).run(model, folder)[0]
    assert a.metrics == b.metrics and a.params["top1_by_base_lr"] == b.params["top1_by_base_lr"]


def test_cached_features_mode(folder):
    model = ModelHandle.random_init("vit_cpu_tiny", seed=0)
    r = tiny_probe(cached_features=True, epochs=2).run(model, folder)[0]
    assert r.variant == {"recipe": "synth", "cached_features": True}
    assert r.params["cached_features"] is True
    # the per-image hits of the selected (epoch, lr) give back its top-1 (the bootstrap's statistics)
    stats = read_per_image(r.per_image)
    assert stats.images == r.params["n_val"]
    assert stats.metric_of_weights(np.ones((1, stats.images)), "top1")[0] == r.metrics["top1"]


def test_kept_hits_are_those_of_the_selected_evaluation_and_head():
    torch.manual_seed(0)
    x, y = torch.randn(40, 8), torch.randint(0, 5, (40,))
    heads = LinearHeads(3, 8, 5)
    opt = GridSGD(heads, torch.tensor([0.01, 0.5, 2.0], dtype=torch.float64))
    hist = train_grid(heads, opt, lambda e: [(x, y)], x, y, epochs=4, steps_per_epoch=1)
    e, h = select_best(hist.top1)
    assert hist.best_at == (e, h)
    assert int(hist.best_hits[0].sum()) * 100.0 / 40 == hist.top1[e][h]
    assert int(hist.best_hits[1].sum()) * 100.0 / 40 == hist.top5[e][h]


def test_batchnorm_with_a_last_batch_of_one_is_refused(folder):
    from harness.errors import ConfigError

    with pytest.raises(ConfigError, match="BatchNorm"):
        tiny_probe(batchnorm=True, batch_size=23).run(ModelHandle.random_init("vit_cpu_tiny"), folder)


# ----------------------------------------------------------------------------- presets / fingerprints
def test_presets_and_fingerprints():
    fps = {p: LinearProbe.from_preset(p, {"dataset": "imagenet"}).fingerprint() for p in LinearProbe.PRESETS}
    assert len(set(fps.values())) == len(fps)  # every recipe has its own fingerprint
    dino = LinearProbe.from_preset("dino", {"dataset": "imagenet"})
    cached = LinearProbe.from_preset("dino", {"dataset": "imagenet", "cached_features": True})
    assert cached.fingerprint() != dino.fingerprint()
    for same in ({"seed": 3}, {"num_workers": 8}, {"progress": False}, {"feature_batch_size": 7}):
        assert LinearProbe.from_preset("dino", {"dataset": "imagenet", **same}).fingerprint() == dino.fingerprint()
    for change in ({"batch_size": 512}, {"epochs": 50}, {"base_lrs": [0.01]}, {"crop": 192}):
        assert LinearProbe.from_preset("dino", {"dataset": "imagenet", **change}).fingerprint() != dino.fingerprint()


def test_recipe_values():
    ibot = LinearProbe.from_preset("ibot", {"dataset": "imagenet"})
    assert len(ibot.cfg.base_lrs) == 45 and ibot.cfg.base_lrs[:2] == [1e-4, 2e-4] and ibot.cfg.base_lrs[-1] == 9
    assert IBOT_BASE_LRS == sorted(IBOT_BASE_LRS)
    assert ibot.lrs()[0] == pytest.approx(1e-4 * 4)  # x B/256, B = 1024
    dino = LinearProbe.from_preset("dino", {"dataset": "imagenet"}).cfg
    assert (dino.base_lrs, dino.epochs, dino.batch_size, dino.momentum, dino.weight_decay) == ([0.001], 100, 1024, 0.9,
                                                                                               0.0)
    assert (dino.lr_schedule, dino.feature_layout, dino.val_interpolation) == ("cosine_epoch", "interleave", "bicubic")
    s = LinearProbe.from_preset("synclr", {"dataset": "imagenet"}).cfg
    assert (s.batchnorm, s.epochs, s.lr_schedule, s.n_last_blocks, s.avgpool_patchtokens, s.drop_last,
            s.eval_every, s.val_interpolation) == (True, 90, "cosine_iter", 1, False, True, 10, "bilinear")
    assert math.isclose(cosine_factor(50, 100), 0.5)
