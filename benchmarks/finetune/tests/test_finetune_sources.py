"""'finetune' from the sources a run can start from: readers whose images are not files (CIFAR's
pickles), the pretraining projection head's first layers (iBOT's ``--finetune_head_layer``), and
models adapted from timm, whose fine-tuned weights come back through the same front-door spec."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch

from harness.models.handle import ModelHandle
from harness.protocol_info import build_protocol

REPO = Path(__file__).resolve().parents[3]


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _official_split_fixtures():
    path = REPO / "tests" / "official_split_fixtures.py"
    spec = importlib.util.spec_from_file_location("official_split_fixtures", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# one optimisation step at CIFAR's 32 px (RandomCrop with padding 4 in place of the resized crop)
ONE_STEP = dict(input_size=32, epochs=1, batch_size=8, update_freq=1, lr=1e-3, warmup_epochs=0, layer_decay=0.75,
                drop_path=0.1, mixup=0.8, cutmix=1.0, eval_batch_size=64, progress=False, save_checkpoint=False)


def test_cifar_images_served_from_the_pickles_are_finetuned(tmp_path, monkeypatch):
    root = _official_split_fixtures().write_cifar10(tmp_path / "cifar", per_batch=3)  # 15 train, 3 test
    monkeypatch.setenv("SSL_BENCH_RESULTS", str(tmp_path / "results"))
    protocol = build_protocol("finetune", None, {**ONE_STEP, "dataset": "cifar10", "val_split": "test"})
    out = protocol.run(ModelHandle.random_init("vit_cpu_tiny", seed=0, depth=2), root)[0]
    assert out.params["n_train"] == 15 and out.params["n_val"] == 3 and out.params["steps"] == 1
    assert out.params["num_classes"] == 10 and 0.0 <= out.metrics["top1"] <= 100.0



@pytest.mark.parametrize("dataset,write,train_split,val_split", [
    ("inat2018", lambda f, root: f.write_inat(root, 2018), "train", "val"),
    ("flowers102", lambda f, root: f.write_flowers(root), "trainval", "test"),
    ("cars_annos", lambda f, root: f.write_cars(root), "train", "test")])
def test_the_file_readers_of_the_transfer_sets_are_finetuned_through_load_image(dataset, write, train_split, val_split,
                                                                               tmp_path, monkeypatch):
    root = write(_official_split_fixtures(), tmp_path / dataset)
    monkeypatch.setenv("SSL_BENCH_RESULTS", str(tmp_path / "results"))
    values = {**ONE_STEP, "dataset": dataset, "train_split": train_split, "val_split": val_split, "batch_size": 4,
              "input_size": 64}  # the fixtures' 8 px images: the resized crop (RandomCrop at 32 px pads to 16 only)
    out = build_protocol("finetune", None, values).run(ModelHandle.random_init("vit_cpu_tiny", seed=0, depth=1),
                                                       root)[0]
    assert out.params["steps"] == 1 and out.params["n_val"] >= 3

def load_checkpoint_sha(path: str) -> str:
    from harness.models.checkpoints import load_checkpoint

    return load_checkpoint(path)[1]["sha256"]


def _official_ibot_checkpoint(path: Path) -> dict:
    """A tiny iBOT training checkpoint in main_ibot.py's layout (vit_cpu_tiny's shapes; the head:
    3 Linear layers 64 -> 32 -> 32 -> 16 with GELU between, then the prototypes), written with
    an argparse.Namespace under ``args`` as the official file has."""
    import argparse

    from harness.models.backbone import create_backbone

    torch.manual_seed(0)
    backbone = create_backbone("vit_cpu_tiny").backbone_state_dict()
    head = {"mlp.0.weight": torch.randn(32, 64), "mlp.0.bias": torch.randn(32), "mlp.2.weight": torch.randn(32, 32),
            "mlp.2.bias": torch.randn(32), "mlp.4.weight": torch.randn(16, 32), "mlp.4.bias": torch.randn(16),
            "last_layer.weight_g": torch.ones(24, 1), "last_layer.weight_v": torch.randn(24, 16),
            "last_layer2.weight_g": torch.ones(24, 1), "last_layer2.weight_v": torch.randn(24, 16)}
    student_head = {k: v + 1.0 for k, v in head.items()}
    torch.save({"teacher": {**{f"backbone.{k}": v for k, v in backbone.items()},
                            **{f"head.{k}": v for k, v in head.items()}},
                "student": {**{f"module.backbone.{k}": v for k, v in backbone.items()},
                            **{f"module.head.{k}": v for k, v in student_head.items()},
                            "module.backbone.masked_embed": torch.zeros(1, 64)},
                "ibot_loss": {"center": torch.zeros(1, 24)}, "epoch": 1, "args": argparse.Namespace(arch="vit_tiny")},
               path)
    return {"teacher": head, "student": student_head}


def test_finetuning_from_the_projection_heads_first_layer(tmp_path, monkeypatch):
    from safetensors.torch import load_file

    from harness.models.importers import import_checkpoint

    heads = _official_ibot_checkpoint(tmp_path / "checkpoint.pth")
    import_checkpoint(tmp_path / "checkpoint.pth", tmp_path / "ibot", trust=True)
    model = ModelHandle.from_checkpoint(tmp_path / "ibot.safetensors")
    root = _official_split_fixtures().write_cifar10(tmp_path / "cifar", per_batch=3)
    monkeypatch.setenv("SSL_BENCH_RESULTS", str(tmp_path / "results"))
    values = {**ONE_STEP, "dataset": "cifar10", "val_split": "test", "lr": 1e-6, "save_checkpoint": True,
              "finetune_head_layer": 1, "use_mean_pooling": False, "init_scale": 1.0}
    out = build_protocol("finetune", None, values).run(model, root)[0]
    head = load_file(Path(out.artifacts["checkpoint"]).with_name("finetuned_head.safetensors"))
    # the head's first Linear (64 -> 32) starts from the teacher's, one small step away; the classifier is 32 -> 10
    torch.testing.assert_close(head["head_mlp.0.weight"], heads["teacher"]["mlp.0.weight"], atol=1e-4, rtol=0)
    assert head["head.weight"].shape == (10, 32) and "head_mlp.2.weight" not in head
    assert out.params["head_from"]["layout"] == "ibot_full" and out.params["head_from"]["branch"] == "teacher"
    from harness.models.sources.common import build_model

    reloaded = build_model(out.params["checkpoint_spec"])  # checkpoint:<path>, as every protocol loads it
    assert reloaded.meta["sha256"] == load_checkpoint_sha(out.params["checkpoint"])
    from_backbone = build_protocol("finetune", None, {**values, "finetune_head_layer": 0})
    assert from_backbone.fingerprint() != build_protocol("finetune", None, values).fingerprint()


def test_the_projection_head_is_read_from_the_branch_and_file_the_model_came_from(tmp_path):
    from harness.errors import ConfigError
    from harness.models.importers import import_checkpoint
    from harness.models.projection_head import read_head_layers

    heads = _official_ibot_checkpoint(tmp_path / "checkpoint.pth")
    import_checkpoint(tmp_path / "checkpoint.pth", tmp_path / "student", which="student", trust=True)
    meta = ModelHandle.from_checkpoint(tmp_path / "student.safetensors").meta
    (w0, b0), (w2, _) = read_head_layers(meta, 2, "ibot")
    assert torch.equal(w0, heads["student"]["mlp.0.weight"]) and torch.equal(w2, heads["student"]["mlp.2.weight"])
    with pytest.raises(ConfigError, match="more than the 2 before its bottleneck"):
        read_head_layers(meta, 3, "ibot")
    with pytest.raises(ConfigError, match="no source_file"):
        read_head_layers(ModelHandle.random_init("vit_cpu_tiny").meta, 1, "random")
    backbone_only = tmp_path / "checkpoint_teacher.pth"  # iBOT's backbone release: no head
    torch.save({"state_dict": {"cls_token": torch.zeros(1, 1, 64)}}, backbone_only)
    no_head = {"source_file": str(backbone_only), "layout": "ibot_teacher", "branch": "backbone"}
    with pytest.raises(ConfigError, match="holds no projection head"):
        read_head_layers(no_head, 1, "ibot")
    with pytest.raises(ConfigError, match="not the file it was imported from"):
        read_head_layers({**meta, "source_sha256": "0" * 64}, 1, "ibot")


def test_an_adapted_timm_models_finetuned_weights_come_back_through_its_spec(tmp_path, monkeypatch):
    import json

    from safetensors.torch import load_file, save_file

    from harness.models.sources.common import build_model

    start = build_model("timm:vit_tiny_patch16_224,weights=random,seed=3,img_size=32,patch_size=8,depth=2,embed_dim=64,"
                        "num_heads=2")
    first = tmp_path / "start.safetensors"
    save_file({k[len("model."):]: v.contiguous() for k, v in start.backbone.state_dict().items()}, str(first))
    spec = f"timm:vit_tiny_patch16_224,weights={first},img_size=32,patch_size=8,depth=2,embed_dim=64,num_heads=2"
    root = _official_split_fixtures().write_cifar10(tmp_path / "cifar", per_batch=3)
    monkeypatch.setenv("SSL_BENCH_RESULTS", str(tmp_path / "results"))
    values = {**ONE_STEP, "dataset": "cifar10", "val_split": "test", "save_checkpoint": True, "lr": 1e-2}
    out = build_protocol("finetune", None, values).run(build_model(spec), root)[0]
    saved, reload_spec = Path(out.params["checkpoint"]), out.params["checkpoint_spec"]
    assert reload_spec.startswith(f"timm:vit_tiny_patch16_224,weights={saved},") and "seed" not in reload_spec
    provenance = json.loads(saved.with_name("finetuned.json").read_text())
    assert provenance["spec"] == reload_spec and provenance["sha256"] == out.params["checkpoint_sha256"]
    assert provenance["finetune"]["steps"] == 1 and provenance["finetune"]["from"]["spec"] == spec
    reloaded = build_model(reload_spec)
    weights, before = load_file(str(saved)), load_file(str(first))
    assert weights.keys() == before.keys()
    for k, v in reloaded.backbone.state_dict().items():
        torch.testing.assert_close(v, weights[k[len("model."):]], rtol=0, atol=0)
    assert not torch.equal(weights["blocks.0.attn.qkv.weight"], before["blocks.0.attn.qkv.weight"])
    knn = build_protocol("knn", None, {"dataset": "cifar10", "val_split": "test", "ks": [5], "resize": 32, "crop": 32,
                                       "cache": False, "progress": False})
    assert knn.run(reloaded, root)[0].metrics["top1"] >= 0.0


def test_a_model_whose_finetuned_weights_cannot_be_written_fails_before_training(tmp_path, monkeypatch):
    from harness.errors import ConfigError
    from harness.models.sources.common import build_model

    model = build_model("timm:vit_tiny_patch16_224,weights=random,img_size=32,patch_size=8,depth=1,embed_dim=64,"
                        "num_heads=2")
    model.meta.pop("spec")  # built in code, not through the front door: no spec loads new weights
    monkeypatch.setenv("SSL_BENCH_RESULTS", str(tmp_path / "results"))
    protocol = build_protocol("finetune", None, {**ONE_STEP, "dataset": "cifar10", "save_checkpoint": True})
    with pytest.raises(ConfigError, match="new weights can be written for models of the timm"):
        protocol.run(model, tmp_path / "no-data-needed")
    assert not (tmp_path / "results").exists()


@pytest.mark.slow
def test_a_transformers_models_finetuned_weights_come_back_as_a_folder(tmp_path, monkeypatch):
    transformers = pytest.importorskip("transformers")
    from safetensors.torch import load_file

    from harness.models.sources.common import build_model

    torch.manual_seed(0)
    config = transformers.ViTConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=2, intermediate_size=128,
                                    image_size=32, patch_size=8)
    transformers.ViTModel(config).save_pretrained(tmp_path / "start")
    root = _official_split_fixtures().write_cifar10(tmp_path / "cifar", per_batch=3)
    monkeypatch.setenv("SSL_BENCH_RESULTS", str(tmp_path / "results"))
    # transformers' ViT blocks have no drop-path slot; its layer list is not one layer decay reads
    values = {**ONE_STEP, "dataset": "cifar10", "val_split": "test", "save_checkpoint": True, "lr": 1e-2,
              "drop_path": 0.0, "layer_decay": 1.0, "use_mean_pooling": False}
    out = build_protocol("finetune", None, values).run(build_model(f"hf:{tmp_path / 'start'}"), root)[0]
    folder = Path(out.params["checkpoint"]).parent
    assert out.params["checkpoint_spec"].startswith(f"hf:{folder},mean=")
    reloaded = build_model(out.params["checkpoint_spec"])  # the hf source refuses a folder missing any weight
    before, after = load_file(str(tmp_path / "start" / "model.safetensors")), load_file(out.params["checkpoint"])
    assert before.keys() == after.keys()
    assert any(not torch.equal(before[k], after[k]) for k in before)
    knn = build_protocol("knn", None, {"dataset": "cifar10", "val_split": "test", "ks": [5], "resize": 32, "crop": 32,
                                       "cache": False, "progress": False})
    assert knn.run(reloaded, root)[0].metrics["top1"] >= 0.0
