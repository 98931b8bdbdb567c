"""The recipe settings of the DeiT-style and SynCLR presets inside a run: the per-epoch schedule and
RASampler's order reach the optimiser and the loader, the reader's official head (iBOT's
CarsDataset) sizes the classifier and shifts the labels, and a reader without one is refused."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from harness.errors import ConfigError
from harness.models.handle import ModelHandle
from harness.protocol_info import build_protocol

REPO = Path(__file__).resolve().parents[3]

pytestmark = pytest.mark.usefixtures("one_torch_thread")


class _Pixels:
    """n tiny images, each a constant of its index (the batch tells which images it holds)."""

    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n

    def load_image(self, i):
        return torch.full((3, 2, 2), float(i))


class _Recorder(nn.Module):
    def __init__(self):
        super().__init__()
        self.head = nn.Linear(12, 4)
        self.seen: list[list[int]] = []

    def forward(self, x):
        if self.training:
            self.seen.append([int(v) for v in x[:, 0, 0, 0]])
        return self.head(x.flatten(1))


def _run(tmp_path, **values):
    from benchmarks.finetune.config import FinetuneConfig
    from benchmarks.finetune.data import TransformedImages
    from benchmarks.finetune.train import FinetuneRun

    cfg = FinetuneConfig(**{"epochs": 3, "batch_size": 64, "lr": 1e-3, "layer_decay": 1.0, "warmup_epochs": 2,
                            "smoothing": 0.0, "progress": False, **values})
    tmp_path.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)  # the same starting weights in every run
    train = TransformedImages(_Pixels(300), np.arange(300) % 4, lambda x: x, seed=0)
    val = TransformedImages(_Pixels(8), np.arange(8) % 4, lambda x: x, seed=0)  # evaluated each epoch, never checked
    return FinetuneRun(_Recorder(), train, val, 4, cfg, torch.device("cpu"), tmp_path / "resume.pt", "x")


def test_repeated_augmentation_and_the_per_epoch_schedule_reach_the_loop(tmp_path):
    from benchmarks.finetune import sampler, schedules

    run = _run(tmp_path, repeated_aug=True, lr_schedule="per_epoch", warmup_lr=1e-6, min_lr=1e-5, update_freq=2)
    assert run.steps_per_epoch == 4  # floor(300 / 256) x 256 = 256 entries, 64 a step
    lrs = []
    run.optimizer.step = (lambda step: lambda *a, **k: (lrs.append(run.optimizer.param_groups[0]["lr"]),
                                                         step(*a, **k))[1])(run.optimizer.step)
    run.train()
    assert len(run.classifier.seen) == 2 * 4 * 3
    seen = [i for batch in run.classifier.seen for i in batch]
    want = [i for e in range(3) for i, _ in sampler.epoch_entries(300, e)]
    assert seen == want  # each image 3 times in a row, the permutation seeded by the epoch
    np.testing.assert_allclose(lrs, np.repeat(schedules.per_epoch_lrs(1e-3, 1e-5, 1e-6, 3, 2), 4), rtol=1e-12)


def test_a_run_stopped_mid_epoch_resumes_to_the_same_images_and_weights_under_repeated_augmentation(tmp_path):
    values = dict(repeated_aug=True, lr_schedule="per_epoch", warmup_lr=1e-6, min_lr=1e-5, update_freq=2)
    whole = _run(tmp_path / "a", **values)
    whole.train()
    first = _run(tmp_path / "b", max_steps=6, **values)  # step 6 of 12: inside the second epoch
    first.train()
    second = _run(tmp_path / "b", **values)
    assert second.try_resume() and second.progress.step == 6
    second.train()
    assert first.classifier.seen + second.classifier.seen == whole.classifier.seen
    for a, b in zip(whole.classifier.state_dict().values(), second.classifier.state_dict().values()):
        torch.testing.assert_close(b, a, rtol=1e-6, atol=1e-7)


def test_mae_schedule_reaches_the_optimiser(tmp_path):
    from benchmarks.finetune import schedules

    run = _run(tmp_path, lr_schedule="mae", warmup_epochs=1, min_lr=1e-6)
    np.testing.assert_allclose(run.lr, schedules.mae_schedule(1e-3, 1e-6, 3, 1, 4), rtol=1e-12)
    assert run.lr[0] == 0.0 and 0 < run.lr[1] < run.lr[4] == pytest.approx(1e-3)


def test_unknown_schedule_combinations_are_refused():
    with pytest.raises(ConfigError, match="warmup_steps"):
        build_protocol("finetune", None, {"lr_schedule": "per_epoch", "warmup_steps": 10})
    with pytest.raises(ConfigError, match="epochs > warmup_epochs"):
        build_protocol("finetune", None, {"lr_schedule": "mae", "epochs": 5, "warmup_epochs": 5})


def _fixtures():
    path = REPO / "tests" / "official_split_fixtures.py"
    spec = importlib.util.spec_from_file_location("official_split_fixtures", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


ONE_STEP = dict(input_size=64, epochs=1, batch_size=4, lr=1e-3, warmup_epochs=0, layer_decay=1.0, eval_batch_size=64,
                progress=False, save_checkpoint=False, train_split="train", val_split="test")


def test_cars_official_head_sizes_the_classifier_and_shifts_the_labels(tmp_path, monkeypatch):
    from harness.registry import DATASETS

    fixtures = _fixtures()
    # 4 classes, 7 distinct bbox_y2 over the training records: a head of 7 outputs, labels 1..4
    fixtures.CARS_RECORDS = [(1, 0, 100), (2, 0, 120), (3, 0, 101), (4, 0, 130), (1, 0, 131), (2, 0, 132),
                             (3, 0, 133), (4, 0, 134), (2, 1, 90), (4, 1, 99), (1, 1, 50)]
    root = fixtures.write_cars(tmp_path / "cars")
    monkeypatch.setenv("SSL_BENCH_RESULTS", str(tmp_path / "results"))
    reader = DATASETS.get("cars_annos")(root, "train")
    assert (reader.official_num_outputs, len(reader.classes)) == (8, 4)
    out = build_protocol("finetune", None, {**ONE_STEP, "dataset": "cars_annos", "head_outputs": "reader_official"}
                         ).run(ModelHandle.random_init("vit_cpu_tiny", seed=0, depth=1), root)[0]
    assert out.params["num_classes"] == reader.official_num_outputs
    plain = build_protocol("finetune", None, {**ONE_STEP, "dataset": "cars_annos"}
                           ).run(ModelHandle.random_init("vit_cpu_tiny", seed=0, depth=1), root)[0]
    assert plain.params["num_classes"] == len(reader.classes)


def test_an_official_cars_head_too_small_for_its_labels_is_refused(tmp_path, monkeypatch):
    from harness.errors import DataError

    root = _fixtures().write_cars(tmp_path / "cars")  # 3 distinct bbox_y2 values for labels 1..4
    monkeypatch.setenv("SSL_BENCH_RESULTS", str(tmp_path / "results"))
    values = {**ONE_STEP, "dataset": "cars_annos", "head_outputs": "reader_official"}
    protocol = build_protocol("finetune", None, values)
    with pytest.raises(DataError, match="3 outputs, too few"):
        protocol.run(ModelHandle.random_init("vit_cpu_tiny", seed=0, depth=1), root)


def test_a_reader_without_an_official_head_is_refused(tmp_path, monkeypatch):
    root = _fixtures().write_flowers(tmp_path / "flowers")
    monkeypatch.setenv("SSL_BENCH_RESULTS", str(tmp_path / "results"))
    protocol = build_protocol("finetune", None, {**ONE_STEP, "dataset": "flowers102", "train_split": "trainval",
                                                 "head_outputs": "reader_official"})
    with pytest.raises(ConfigError, match="official_num_outputs"):
        protocol.run(ModelHandle.random_init("vit_cpu_tiny", seed=0, depth=1), root)
