"""Layer-decay parameter groups against iBOT's official ``create_optimizer`` /
``get_parameter_groups`` with ``LayerDecayValueAssigner`` (fixtures/ibot_param_groups.json: ViT-S/16,
ViT-B/16, ViT-L/16 as ``run.sh imagenet_cls`` plus each README command builds them).

The project's side is what the run builds: the harness ViT inside the fine-tuned classifier
(``backbone.`` prefix, class-token head as ``--use_cls``), grouped by
``benchmarks.finetune.train.build_optimizer``. Every official parameter name is mapped to one
project name (``fixture_files.project_name``) and back; built on the meta device (names and
shapes only). timm's ``param_groups_layer_decay`` is checked on the same names.
"""
from __future__ import annotations

import pytest
import torch

from benchmarks.finetune.reference.fixture_files import load_json, project_name

ARCHS = {"vit_small": "vit_small_patch16_224", "vit_base": "vit_base_patch16_224",
         "vit_large": "vit_large_patch16_224"}


def _official(arch):
    return load_json("ibot_param_groups.json")["models"][arch]


def _classifier(arch):
    from benchmarks.finetune.model import FinetuneClassifier
    from harness.models.backbone import create_backbone

    with torch.device("meta"):
        backbone = create_backbone(ARCHS[arch])
        return FinetuneClassifier(backbone, 1000, use_mean_pooling=False, init_scale=0.001, drop_path=0.0, seed=0)


def _project_optimizer(arch):
    from benchmarks.finetune.config import FinetuneConfig
    from benchmarks.finetune.train import build_optimizer

    off = _official(arch)
    model = _classifier(arch)
    cfg = FinetuneConfig(layer_decay=off["layer_decay"], weight_decay=off["weight_decay"], use_mean_pooling=False)
    return model, build_optimizer(model, cfg)


@pytest.fixture(scope="module", params=list(ARCHS))
def both(request):
    return request.param, _official(request.param), *_project_optimizer(request.param)


def test_the_names_map_one_to_one(both):
    _, off, model, _ = both
    official = [p["name"] for p in off["parameters"]]
    ours = [n for n, _ in model.named_parameters()]
    assert [project_name(n) for n in official] == ours  # same parameters, same order
    shapes = dict((n, list(p.shape)) for n, p in model.named_parameters())
    assert all(shapes[project_name(p["name"])] == p["shape"] for p in off["parameters"])


def test_groups_in_the_official_order_with_the_official_members(both):
    _, off, model, optimizer = both
    names = {id(p): n for n, p in model.named_parameters()}
    assert len(optimizer.param_groups) == len(off["groups"])
    for got, want in zip(optimizer.param_groups, off["groups"]):
        assert [names[id(p)] for p in got["params"]] == [project_name(n) for n in want["params"]], want["name"]
        assert got["lr_scale"] == pytest.approx(want["lr_scale"], rel=1e-12), want["name"]
        assert got["weight_decay"] == want["weight_decay"], want["name"]


def test_every_parameter_has_the_official_layer_id_scale_and_decay(both):
    from harness.training.layer_decay import group_table, layer_scheme

    arch, off, model, optimizer = both
    scheme = layer_scheme(model, "backbone.")
    table = group_table(model, off["weight_decay"], off["layer_decay"], scheme=scheme)
    group_of = {n: g for g, row in table.items() for n in row["params"]}
    for p in off["parameters"]:
        name = project_name(p["name"])
        assert scheme.layer_id(name, off["depth"]) == p["layer_id"], name
        assert group_of[name] == p["group"], name
        assert table[p["group"]]["lr_scale"] == pytest.approx(p["lr_scale"], rel=1e-12), name
        assert table[p["group"]]["weight_decay"] == p["weight_decay"], name


def test_adamw_settings_match(both):
    _, off, _, optimizer = both
    assert type(optimizer).__name__ == off["optimizer"] == "AdamW"
    d = off["optimizer_defaults"]
    assert optimizer.defaults["eps"] == d["eps"] and list(optimizer.defaults["betas"]) == d["betas"]
    assert optimizer.defaults["weight_decay"] == d["weight_decay"] == 0.0  # every group sets its own


@pytest.mark.parametrize("arch", list(ARCHS))
def test_timm_param_groups_layer_decay_differs_only_at_the_final_norm(arch):
    """Why the project groups with its own harness.training.layer_decay and not timm's
    ``param_groups_layer_decay``: on timm's ViT with the official names (the head at the root, as
    iBOT's model has it), timm agrees with the official groups on every parameter but the final
    norm. timm's ViT ``group_matcher`` files ``norm`` with the last block (layer ``depth``, lr scale
    ``layer_decay``); iBOT's ``get_num_layer_for_vit`` puts it with the head (layer ``depth + 1``,
    lr scale 1). That moves ``norm.weight`` / ``norm.bias`` into the last block's no-decay group
    (lr x layer_decay instead of lr), and the head's two groups come in the other order."""
    from timm.optim import param_groups_layer_decay

    from harness.models.archs import arch_kwargs_for
    from harness.models.backbone import ViTBackbone

    off = _official(arch)
    with torch.device("meta"):
        vit = ViTBackbone(ARCHS[arch], **dict(arch_kwargs_for(ARCHS[arch]), num_classes=1000))
    groups = param_groups_layer_decay(vit, weight_decay=off["weight_decay"], layer_decay=off["layer_decay"],
                                      no_weight_decay_list=off["skip_list"])
    names = {id(p): n for n, p in vit.named_parameters()}
    timm_of = {names[id(p)]: (g["lr_scale"], g["weight_decay"]) for g in groups for p in g["params"]}
    differ = {p["name"] for p in off["parameters"]
              if timm_of[p["name"]] != pytest.approx((p["lr_scale"], p["weight_decay"]), rel=1e-12)}
    assert differ == {"norm.weight", "norm.bias"}
    ld = off["layer_decay"]
    assert timm_of["norm.weight"] == pytest.approx((ld, 0.0)) and timm_of["head.weight"] == pytest.approx((1.0, 0.05))
    official_norm = next(p for p in off["parameters"] if p["name"] == "norm.weight")
    assert (official_norm["layer_id"], official_norm["lr_scale"]) == (off["depth"] + 1, 1.0)
