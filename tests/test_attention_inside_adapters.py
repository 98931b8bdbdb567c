"""harness.features.attention: the last attention block read inside every adapter (timm,
transformers, open_clip ViTs), checked against each library's own attention probabilities; the
models without one (a CNN, a Swin) refused in one sentence naming them."""
from __future__ import annotations

import pytest
import torch

from harness.errors import NotApplicable
from harness.features.attention import cls_attention_rows, last_attention, missing_attention, require_attention
from harness.models.sources import build_model


@pytest.fixture(scope="module")
def hf_folders(tmp_path_factory):
    pytest.importorskip("transformers")
    from model_zoo_fixtures import tiny_dinov2, tiny_transformers_folders

    folder = tmp_path_factory.mktemp("hf")
    return {"dinov2": tiny_dinov2(folder)[0], **tiny_transformers_folders(folder)}


@pytest.mark.parametrize("name", ["dinov2", "vit", "clip", "siglip", "dinov2_reg"])
def test_transformers_attention_is_the_librarys_own(hf_folders, name):
    backbone = build_model(f"hf:{hf_folders[name]}").backbone.eval()
    x = torch.randn(2, 3, backbone.patch_size * 3, backbone.patch_size * 4, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        rows = cls_attention_rows(backbone, x, head=1)
        inner = backbone.model
        inner.config._attn_implementation = "eager"  # the probabilities as the library computes them
        theirs = inner(pixel_values=backbone.input_norm(x), output_attentions=True,
                       **backbone.interpolate_kw).attentions[-1]
    assert rows.shape == (2, 12)
    assert torch.allclose(rows, theirs[:, 1, 0, -12:], atol=1e-5)


def test_open_clip_attention_is_multihead_attentions_own(tmp_path):
    pytest.importorskip("open_clip")
    from model_zoo_fixtures import tiny_open_clip

    config, weights, _ = tiny_open_clip(tmp_path)
    backbone = build_model({"source": "open_clip", "target": str(config), "weights": str(weights)}).backbone.eval()
    attn = backbone.model.transformer.resblocks[-1].attn
    seen = {}
    handle = attn.register_forward_pre_hook(
        lambda _m, args, kwargs: seen.__setitem__("x", args[0] if args else kwargs["query"]), with_kwargs=True)
    x = torch.randn(2, 3, 48, 64, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        rows = cls_attention_rows(backbone, x, head=0)
        handle.remove()
        _, theirs = attn(seen["x"], seen["x"], seen["x"], need_weights=True, average_attn_weights=False)
    # the weights are (B, heads, L, S) whatever the layout of the tokens
    assert torch.allclose(rows, theirs[:, 0, 0, -12:], atol=1e-5)


def test_timm_vits_with_one_and_two_prefix_tokens():
    for target, prefix in (("vit_tiny_patch16_224", 1), ("deit_tiny_distilled_patch16_224", 2)):
        backbone = build_model({"source": "timm", "target": target, "weights": "random", "depth": 1}).backbone.eval()
        found = last_attention(backbone)
        assert found is not None and (found.layout, found.heads) == ("fused", 3)
        x = torch.randn(1, 3, 32, 48, generator=torch.Generator().manual_seed(0))
        with torch.no_grad():
            rows = cls_attention_rows(backbone, x, head=2)
        assert rows.shape == (1, 6) and float(rows.sum()) < 1.0  # the prefix tokens hold the rest
        assert int(backbone.model.num_prefix_tokens) == prefix


def test_models_without_attention_are_named_in_one_sentence():
    r18 = build_model("timm:resnet18,weights=random", name="r18")
    swin = build_model({"source": "timm", "target": "swin_tiny_patch4_window7_224", "weights": "random",
                        "embed_dim": 16, "depths": [1, 1, 1, 1], "num_heads": [1, 2, 2, 4]}, name="swin")
    for model in (r18, swin):
        assert last_attention(model.backbone) is None
        reason = missing_attention(model.backbone, "occlusion", model.name)
        assert reason.startswith("occlusion needs a ViT's last attention block") and f"model {model.name} (" in reason
        with pytest.raises(NotApplicable, match=f"model {model.name}"):
            require_attention(model.backbone, "LOST", model.name)
