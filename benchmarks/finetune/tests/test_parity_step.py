"""The fine-tuning step against iBOT's official ``engine_for_finetuning.train_one_epoch``
(benchmarks/finetune/fixtures/ibot_train_steps.*, made by reference/make_ibot_fixtures.py).

The official run: a small official ViT (``modeling_finetune.VisionTransformer``, class-token
head, drop path 0.3) from stored weights, four stored batches, timm's Mixup (mixup 0.8, cutmix
1.0, smoothing 0.1), SoftTargetCrossEntropy, AdamW over the layer-decay groups (0.75), the
official lr / wd schedules (warm-up from 0, weight decay rising), timm's ModelEma (decay 0.9),
numpy and torch seeded once before the epoch. Here the project's classifier
(benchmarks/finetune/model.py) gets the same weights under its names, and the project's
optimizer, schedules, Mixup, criterion, EMA and ``micro_step`` run the same four batches from
the same seeds. Three scenarios: the recipe (one batch per update, no clipping), gradient
accumulation over two batches with ``clip_grad`` 1.0, and the mean-pooling head (the argparse
default; the recipes' run.sh passes ``--use_cls``).
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

from benchmarks.finetune.reference.fixture_files import load_arrays, load_json, project_name

# float32 forward / backward of the same network in another attention kernel (timm's fused
# scaled_dot_product_attention against the official explicit softmax): measured max |diff|
# 2.4e-7 in the losses, 1.7e-6 in the weights after four AdamW steps, 1e-7 relative in the
# gradient norms (the README's Parity section); the tolerances leave a factor 10 for other CPUs.
# A wrong lr scale, weight decay, EMA decay or mixup draw moves them by 1e-4 or more.
LOSS_ATOL = 2e-5
WEIGHT_ATOL = 2e-5
NORM_RTOL = 1e-5
# digests are sums over up to 6k entries: compared relative to their size
DIGEST_RTOL = 1e-5


def _fixture():
    return load_json("ibot_train_steps.json"), load_arrays("ibot_train_steps.npz")


def _project_setup(data, scenario):
    """The project's classifier, optimizer, schedules, Mixup, criterion and EMA for a scenario."""
    from benchmarks.finetune.config import FinetuneConfig
    from benchmarks.finetune.model import FinetuneClassifier
    from benchmarks.finetune.train import build_criterion, build_ema, build_mixup, build_optimizer, official_cosine
    from harness.models.backbone import ViTBackbone

    m, s, sc = data["model"], data["settings"], data["scenarios"][scenario]
    cfg = FinetuneConfig(lr=s["lr"], min_lr=s["min_lr"], epochs=s["epochs"], warmup_epochs=s["warmup_epochs"],
                         weight_decay=s["weight_decay"], weight_decay_end=s["weight_decay_end"],
                         layer_decay=s["layer_decay"], mixup=s["mixup"], cutmix=s["cutmix"],
                         mixup_prob=s["mixup_prob"], mixup_switch_prob=s["mixup_switch_prob"],
                         mixup_mode=s["mixup_mode"], smoothing=s["smoothing"], model_ema=True,
                         model_ema_decay=s["ema_decay"], drop_path=m["drop_path_rate"],
                         use_mean_pooling=sc["use_mean_pooling"], init_scale=m["init_scale"],
                         update_freq=sc["update_freq"], clip_grad=sc["max_norm"],
                         batch_size=s["batch"] * sc["update_freq"])
    backbone = ViTBackbone("custom", img_size=m["img_size"], patch_size=m["patch_size"], embed_dim=m["embed_dim"],
                           depth=m["depth"], num_heads=m["num_heads"], mlp_ratio=m["mlp_ratio"],
                           qkv_bias=m["qkv_bias"])
    model = FinetuneClassifier(backbone, m["num_classes"], use_mean_pooling=cfg.use_mean_pooling,
                               init_scale=cfg.init_scale, drop_path=cfg.drop_path, seed=0)
    updates = s["batches"] // sc["update_freq"]
    lr = official_cosine(cfg.peak_lr(), cfg.min_lr, cfg.epochs, updates, cfg.warmup_epochs, cfg.warmup_steps)
    wd = official_cosine(cfg.weight_decay, cfg.weight_decay_end, cfg.epochs, updates)
    return cfg, model, lr, wd, build_criterion, build_mixup, build_ema, build_optimizer


def _official_initial_name(stored: str, mean_pooling: bool) -> str:
    """The stored weights are the class-token model's; the mean-pooling model has the same numbers
    with its ``norm`` (ones and zeros at init) as ``fc_norm`` (the generator checks this)."""
    return "fc_norm." + stored[5:] if mean_pooling and stored.startswith("norm.") else stored


def _load_initial(model, arrays, mean_pooling):
    """The stored official weights, every official name mapped to exactly one project name."""
    initial = {project_name(_official_initial_name(k[len("initial/"):], mean_pooling)):
               torch.from_numpy(v.astype(np.float32)) for k, v in arrays.items() if k.startswith("initial/")}
    missing, unexpected = model.load_state_dict(initial, strict=False)
    assert not missing and not unexpected, f"names not mapped: missing {missing}, unexpected {unexpected}"


def _digest(model, indices):
    out = {}
    for n, p in model.named_parameters():
        flat = p.detach().double().flatten()
        out[n] = [float(flat.sum()), float(flat.abs().sum())] + [float(flat[i % flat.numel()]) for i in indices]
    return out


def run_project(scenario):
    """The project's side of a scenario: per micro-batch losses, per update (grad norm, lr and
    weight decay by parameter name, digest), the final state and the EMA digest."""
    from benchmarks.finetune.step import micro_step

    data, arrays = _fixture()
    cfg, model, lr, wd, build_criterion, build_mixup, build_ema, build_optimizer = _project_setup(data, scenario)
    _load_initial(model, arrays, cfg.use_mean_pooling)
    optimizer = build_optimizer(model, cfg)
    criterion, mixup, ema = build_criterion(cfg), build_mixup(cfg, data["model"]["num_classes"]), build_ema(model, cfg)
    names = {id(p): n for n, p in model.named_parameters()}
    images = torch.from_numpy(arrays["images"].astype(np.float32))
    labels = torch.from_numpy(arrays["labels"]).long()
    s, uf = data["settings"], cfg.update_freq
    np.random.seed(s["draw_seed"])
    torch.manual_seed(s["draw_seed"])
    model.train()
    losses, updates, step = [], [], 0
    for i in range(s["batches"]):
        out = micro_step(model, criterion, optimizer, images[i], labels[i], lr=float(lr[step]),
                         weight_decay=float(wd[step]), mixup=mixup, update_freq=uf, update=(i + 1) % uf == 0,
                         clip_grad=cfg.clip_grad, ema=ema)
        losses.append(out.loss)
        if out.updated:
            step += 1
            by_name = {names[id(p)]: (g["lr"], g["weight_decay"]) for g in optimizer.param_groups for p in g["params"]}
            updates.append({"grad_norm": out.grad_norm, "by_name": by_name,
                            "digest": _digest(model, data["digest_indices"])})
    ema_model = ema.module if hasattr(ema, "module") else ema.ema
    return {"losses": losses, "updates": updates, "state": model.state_dict(),
            "ema_digest": _digest(ema_model, data["digest_indices"])}


def _assert_digests_close(official: dict, project: dict, what: str) -> None:
    assert {project_name(n) for n in official} == set(project), f"{what}: other parameters"
    for name, want in official.items():
        np.testing.assert_allclose(project[project_name(name)], want, rtol=DIGEST_RTOL, atol=WEIGHT_ATOL,
                                   err_msg=f"{what}: {name} (sum, sum |x|, entries {DIGEST_INDICES_DOC})")


DIGEST_INDICES_DOC = "0, 7, -1"


@pytest.fixture(scope="module", params=["recipe", "accumulate_clip", "mean_pooling"])
def scenario(request):
    return request.param, _fixture()[0]["scenarios"][request.param], run_project(request.param)


def test_losses_match_the_official_step(scenario):
    _, official, ours = scenario
    want = [mb["loss"] for mb in official["micro_batches"]]
    np.testing.assert_allclose(ours["losses"], want, rtol=0, atol=LOSS_ATOL)


def test_lr_and_weight_decay_of_every_parameter_match(scenario):
    _, official, ours = scenario
    assert len(ours["updates"]) == len(official["updates"])
    for got, want in zip(ours["updates"], official["updates"]):
        for group, lr, wd in zip(official["groups"], want["group_lr"], want["group_weight_decay"]):
            for name in group["params"]:
                assert got["by_name"][project_name(name)] == pytest.approx((lr, wd), rel=1e-12, abs=1e-15), name


def test_grad_norms_match(scenario):
    _, official, ours = scenario
    np.testing.assert_allclose([u["grad_norm"] for u in ours["updates"]],
                               [u["grad_norm"] for u in official["updates"]], rtol=NORM_RTOL)


def test_weights_after_every_update_match(scenario):
    _, official, ours = scenario
    for i, (got, want) in enumerate(zip(ours["updates"], official["updates"])):
        _assert_digests_close(want["digest"], got["digest"], f"after update {i}")


def test_final_weights_match_elementwise(scenario):
    name, _, ours = scenario
    arrays = _fixture()[1]
    prefix = f"{name}/final/"
    worst = 0.0
    for key, value in arrays.items():
        if key.startswith(prefix):
            got = ours["state"][project_name(key[len(prefix):])].detach().numpy()
            worst = max(worst, float(np.max(np.abs(got - value))))
    assert worst < WEIGHT_ATOL, f"max |project - official| over the final weights: {worst:.3g}"


def test_ema_matches_timm_model_ema(scenario):
    """The official ModelEma (timm v1, constant decay) against the project's EMA."""
    _, official, ours = scenario
    _assert_digests_close(official["ema_digest"], ours["ema_digest"], "EMA after the last update")


def test_model_ema_v3_without_a_step_is_timm_model_ema():
    """What the project's EMA relies on: timm's ModelEmaV3 updated without a step applies the
    constant decay, as the official ModelEma (v1) does; given ``step=`` its first update is a copy
    (decay 0), which the official EMA never does."""
    from timm.utils import ModelEma, ModelEmaV3

    torch.manual_seed(0)
    net = torch.nn.Linear(4, 3)
    v1, v3, v3_step = ModelEma(net, decay=0.9), ModelEmaV3(net, decay=0.9), ModelEmaV3(net, decay=0.9)
    start = net.weight.detach().clone()
    with torch.no_grad():
        net.weight.add_(1.0)
    v1.update(net)
    v3.update(net)
    v3_step.update(net, step=1)
    torch.testing.assert_close(v3.module.weight, v1.ema.weight)
    torch.testing.assert_close(v1.ema.weight, 0.9 * start + 0.1 * net.weight.detach())
    torch.testing.assert_close(v3_step.module.weight, net.weight.detach())
