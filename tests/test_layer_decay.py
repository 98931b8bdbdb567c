"""harness.training.layer_decay: iBOT's (BEiT's) layer-wise lr decay groups."""
from __future__ import annotations

import pytest
import torch
from torch import nn

from harness.errors import ConfigError
from harness.models.backbone import create_backbone
from harness.training.layer_decay import (MMCV_SKIP_LIST, LayerScheme, group_table, layer_scales,
                                          layer_scheme, num_layers, parameter_groups)


@pytest.fixture(scope="module")
def vit():
    torch.manual_seed(0)
    return create_backbone("vit_cpu_tiny")


def test_layer_ids_follow_get_num_layer_for_vit():
    s = LayerScheme()
    assert [s.layer_id(n, 12) for n in ("cls_token", "mask_token", "pos_embed", "patch_embed.proj.weight")] == [0] * 4
    assert s.layer_id("blocks.0.attn.qkv.weight", 12) == 1
    assert s.layer_id("blocks.11.mlp.fc2.bias", 12) == 12
    assert [s.layer_id(n, 12) for n in ("norm.weight", "fc_norm.bias", "head.weight", "rel_pos_bias.t")] == [13] * 4


def test_scales_are_the_assigner_values():
    v = layer_scales(0.75, 12)
    assert len(v) == 14 and v[-1] == 1.0
    assert v[0] == pytest.approx(0.75 ** 13) and v[1] == pytest.approx(0.75 ** 12)


def test_groups_of_the_harness_vit(vit):
    table = group_table(vit, 0.05, 0.65)
    depth = len(vit.blocks)
    # official order: groups appear as their first parameter does in named_parameters()
    first = [next(k for k, g in table.items() if n in g["params"]) for n, _ in vit.named_parameters()]
    assert list(table) == list(dict.fromkeys(first))
    assert table["layer_0_no_decay"]["params"][:2] == ["cls_token", "pos_embed"]  # no_weight_decay()
    assert "patch_embed.proj.weight" in table["layer_0_decay"]["params"]
    assert "patch_embed.proj.bias" in table["layer_0_no_decay"]["params"]
    assert table[f"layer_{depth + 1}_no_decay"]["params"] == ["norm.weight", "norm.bias"]
    for name, g in table.items():
        layer = int(name.split("_")[1])
        assert g["lr_scale"] == pytest.approx(0.65 ** (depth + 1 - layer))
        assert g["weight_decay"] == (0.0 if name.endswith("no_decay") else 0.05)
    n_params = sum(len(g["params"]) for g in table.values())
    assert n_params == sum(1 for p in vit.parameters() if p.requires_grad)


def test_no_layer_decay_gives_the_plain_groups(vit):
    groups = parameter_groups(vit, 0.05, 1.0, with_group_names=True)
    assert [g["group_name"] for g in groups] == ["no_decay", "decay"]
    assert all(g["lr_scale"] == 1.0 for g in groups)


class _Detector(nn.Module):
    def __init__(self, backbone):
        super().__init__()
        self.backbone = backbone
        self.neck = nn.Linear(4, 4)


def test_mmcv_prefix_and_its_skip_list_quirk(vit):
    det = _Detector(vit)
    groups = parameter_groups(det, 0.05, 0.65, depth=3, scheme=LayerScheme(prefix="backbone."),
                              skip_list=MMCV_SKIP_LIST, base_lr=1e-4, with_group_names=True)
    by_name = {g["group_name"]: g for g in groups}
    names = group_table(det, 0.05, 0.65, depth=3, scheme=LayerScheme(prefix="backbone."),
                        skip_list=MMCV_SKIP_LIST)
    # the bare skip list never matches prefixed names: pos_embed and cls_token are decayed
    assert names["layer_0_decay"]["params"][:2] == ["backbone.cls_token", "backbone.pos_embed"]
    assert names["layer_4_decay"]["params"] == ["neck.weight"]
    assert by_name["layer_1_decay"]["lr"] == pytest.approx(1e-4 * 0.65 ** 3)
    # the classification rule under the same prefix takes no_weight_decay() of the backbone
    default = group_table(det, 0.05, 0.65, scheme=LayerScheme(prefix="backbone."))
    assert "backbone.pos_embed" in default["layer_0_no_decay"]["params"]


def test_scheme_found_inside_an_adapter_and_counted(vit):
    class Adapter(nn.Module):
        def __init__(self):
            super().__init__()
            self.model = vit

    scheme = layer_scheme(Adapter())
    assert scheme.prefix == "model." and num_layers(Adapter(), scheme) == len(vit.blocks)
    assert scheme.layer_id("model.blocks.2.norm1.weight", 3) == 3


def test_model_without_blocks_is_one_config_error():
    cnn = nn.Sequential(nn.Conv2d(3, 8, 3), nn.ReLU())
    with pytest.raises(ConfigError, match=r"Conv2d.*layer_decay=1\.0"):
        parameter_groups(cnn, 0.05, 0.75)
    assert len(parameter_groups(cnn, 0.05, 1.0)) == 2  # without layer decay it trains


def test_transformers_and_open_clip_block_lists():
    class Layer(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(4, 4)

    class HFViT(nn.Module):  # transformers' ViTModel layout
        def __init__(self):
            super().__init__()
            self.embeddings = nn.Module()
            self.embeddings.cls_token = nn.Parameter(torch.zeros(1, 1, 4))
            self.encoder = nn.Module()
            self.encoder.layer = nn.ModuleList([Layer(), Layer()])
            self.layernorm = nn.LayerNorm(4)

    class Adapter(nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.model = inner

    table = group_table(Adapter(HFViT()), 0.05, 0.5)
    assert table["layer_0_decay"]["params"] == ["model.embeddings.cls_token"]
    assert table["layer_2_decay"]["params"] == ["model.encoder.layer.1.fc.weight"]
    assert table["layer_3_no_decay"]["params"] == ["model.layernorm.weight", "model.layernorm.bias"]
    assert table["layer_3_no_decay"]["lr_scale"] == 1.0 and table["layer_0_decay"]["lr_scale"] == 0.125

    class HFCLIPVision(nn.Module):  # transformers' CLIPVisionModel layout (4.x: under vision_model)
        def __init__(self):
            super().__init__()
            self.vision_model = nn.Module()
            self.vision_model.pre_layrnorm = nn.LayerNorm(4)
            self.vision_model.encoder = nn.Module()
            self.vision_model.encoder.layers = nn.ModuleList([Layer(), Layer(), Layer()])

    hf_clip = Adapter(HFCLIPVision())
    scheme = layer_scheme(hf_clip)
    assert (scheme.prefix, scheme.blocks, num_layers(hf_clip, scheme)) == ("model.vision_model.", "encoder.layers", 3)
    assert scheme.layer_id("model.vision_model.pre_layrnorm.weight", 3) == 0

    class Visual(nn.Module):  # open_clip's VisionTransformer layout
        def __init__(self):
            super().__init__()
            self.conv1 = nn.Conv2d(3, 4, 2)
            self.class_embedding = nn.Parameter(torch.zeros(4))
            self.transformer = nn.Module()
            self.transformer.resblocks = nn.ModuleList([Layer()])
            self.ln_post = nn.LayerNorm(4)

    clip = Adapter(nn.Module())
    clip.model.visual = Visual()
    scheme = layer_scheme(clip)
    assert scheme.prefix == "model.visual." and num_layers(clip, scheme) == 1
    ids = {n: scheme.layer_id(n, 1) for n, _ in clip.named_parameters()}
    assert ids["model.visual.conv1.weight"] == ids["model.visual.class_embedding"] == 0
    assert ids["model.visual.transformer.resblocks.0.fc.weight"] == 1 and ids["model.visual.ln_post.weight"] == 2
