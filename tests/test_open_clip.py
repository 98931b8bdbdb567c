"""open_clip as a model source: the image tower of a local weights file, its own normalisation,
global features equal to open_clip's ``encode_image``, through the CPU protocols on SynthScenes."""
from __future__ import annotations

import pytest
import torch

from harness.errors import CheckpointError, ConfigError
from harness.models.feature_backbone import IMAGENET_MEAN, IMAGENET_STD
from harness.models.sources import build_model
from harness.protocol_info import build_protocol
from harness.running.evaluate import evaluate

open_clip = pytest.importorskip("open_clip")
from model_zoo_fixtures import TINY_OPEN_CLIP, tiny_open_clip  # noqa: E402

KNN = {"dataset": "imagefolder", "feature": "cls", "ks": [3], "progress": False}


@pytest.fixture(scope="module")
def clip_files(tmp_path_factory):
    return tiny_open_clip(tmp_path_factory.mktemp("open_clip"))


def _as_clip_input(x: torch.Tensor, mean, std) -> torch.Tensor:
    """ImageNet-normalised images (what the protocols give) as open_clip's preprocess gives them."""
    def col(v):
        return torch.tensor(v).view(1, 3, 1, 1)

    return (x * col(IMAGENET_STD) + col(IMAGENET_MEAN) - col(mean)) / col(std)


def test_global_features_equal_encode_image(clip_files):
    config, weights, model = clip_files
    handle = build_model(f"open_clip:{config},weights={weights}")
    info = handle.record_info()["adapter"]
    cfg = model.visual.preprocess_cfg
    assert info["norm_source"] == "open_clip preprocess_cfg" and info["stride"] == 16 and info["embed_dim"] == 32
    torch.manual_seed(0)
    x = torch.randn(3, 3, 64, 64)
    with torch.no_grad():
        got = handle.backbone.get_features(x, 2)
        ref = model.encode_image(_as_clip_input(x, cfg["mean"], cfg["std"]))
        tokens = model.visual.forward_intermediates(_as_clip_input(x, cfg["mean"], cfg["std"]), indices=1,
                                                    normalize_intermediates=True, output_fmt="NLC",
                                                    intermediates_only=True)["image_intermediates"][0]
    assert got.cls.shape == (3, 2, 32) and got.patches.shape == (3, 2, 4, 4, 32)
    assert (got.cls[:, -1] - ref).abs().max().item() <= 1e-5
    # the patch grid: open_clip's own normalised patch tokens, in the projected space
    assert (got.patches[:, -1].reshape(3, 16, 32) - tokens @ model.visual.proj).abs().max().item() <= 1e-5


def test_a_stated_normalisation_and_a_tower_only_file(clip_files, tmp_path):
    from safetensors.torch import save_file

    config, weights, model = clip_files
    tower = tmp_path / "visual.safetensors"
    save_file({f"visual.{k}": v.contiguous() for k, v in model.visual.state_dict().items()}, str(tower))
    whole = build_model(f"open_clip:{config},weights={weights}")
    only = build_model(f"open_clip:{config},weights={tower}")
    assert only.cache_key == whole.cache_key  # keyed by the tower's weights: the text tower is not read
    stated = build_model(f"open_clip:{config},weights={weights},norm=imagenet")
    assert stated.record_info()["adapter"]["norm_source"] == "stated" and stated.cache_key != whole.cache_key


def test_other_input_sizes_resize_the_position_table_as_open_clip_does(clip_files):
    from open_clip.model import resize_pos_embed

    config, weights, model = clip_files
    handle = build_model(f"open_clip:{config},weights={weights}")
    state = {"visual.positional_embedding": model.visual.positional_embedding.detach().clone()}
    big = open_clip.create_model("tiny_clip", pretrained=None, force_image_size=96).eval()
    resize_pos_embed(state, big)  # what open_clip does loading these weights for 96 px
    with torch.no_grad():
        ours = handle.backbone._positions(6, 6)
    assert (ours - state["visual.positional_embedding"]).abs().max().item() <= 1e-6


def test_wrong_open_clip_specs_are_one_line(clip_files, tmp_path):
    import json

    config, weights, _ = clip_files
    with pytest.raises(CheckpointError, match="give weights=FILE"):
        build_model(f"open_clip:{config}")
    with pytest.raises(ConfigError, match="open_clip has no model 'ViT-B-3'"):
        build_model("open_clip:ViT-B-3,weights=random")
    # a ResNet image tower (open_clip's ModifiedResNet, as RN50's), one block per stage
    resnet = tmp_path / "tiny_rn_clip.json"
    tower = {"image_size": 64, "layers": [1, 1, 1, 1], "width": 16}
    resnet.write_text(json.dumps({**TINY_OPEN_CLIP, "vision_cfg": tower}))
    with pytest.raises(ConfigError, match="ModifiedResNet.*ViT towers"):
        build_model(f"open_clip:{resnet},weights=random")
    with pytest.raises(ConfigError, match=r"unknown option\(s\) \['wieghts'\]"):
        build_model(f"open_clip:{config},wieghts={weights}")


def test_open_clip_through_knn_changes_nothing(clip_files, synth_tiny, isolated_home):
    from safetensors.torch import load_file

    config, weights, _ = clip_files
    handle = build_model(f"open_clip:{config},weights={weights}")
    before = {k: v for k, v in load_file(str(weights)).items() if k.startswith("visual.")}
    records, _ = evaluate(handle, build_protocol("knn", "synth", KNN), synth_tiny / "imagenet")
    assert records and 0 <= records[0]["metrics"]["top1"] <= 100
    assert records[0]["model"]["adapter"]["adapter"] == "open_clip"
    after = handle.backbone.model.state_dict()
    assert all(torch.equal(after[k[len("visual."):]], v) for k, v in before.items())


@pytest.mark.slow
def test_open_clip_through_every_cpu_protocol(clip_files, synth_tiny, isolated_home):
    config, weights, _ = clip_files
    handle = build_model(f"open_clip:{config},weights={weights}")
    dense = {"dataset": "voc", "fractions": ["1/1"], "seeds": [1], "progress": False}
    runs = [("dense_nn", "cribo", dense, synth_tiny), ("dense_nn", "hbird_synth", dense, synth_tiny),
            ("linear", "synth", {"dataset": "imagefolder", "cached_features": True, "epochs": 2, "progress": False},
             synth_tiny / "imagenet"),
            ("linear", "synth", {"dataset": "imagefolder", "epochs": 1, "progress": False}, synth_tiny / "imagenet")]
    for name, preset, values, root in runs:
        records, _ = evaluate(handle, build_protocol(name, preset, values), root)
        assert records, (name, preset)
        for rec in records:
            metric = rec["metrics"].get("mIoU", rec["metrics"].get("top1"))
            assert metric is not None and 0 <= metric <= 100, (name, preset, rec["metrics"])
