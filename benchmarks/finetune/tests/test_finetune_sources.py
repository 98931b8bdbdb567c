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


@pytest.fixture(autouse=True)
def one_torch_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


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
