"""Pretraining visibly learns. Each CPU preset below, trained for its full schedule on
SynthScenes small, beats the same backbone at random init (the engine's step-0 weights,
same seed) on the metrics it is known to move at that budget (docs/BENCHMARKS.md,
"Learning" and "Every method vs random init, same budget"):
- DINO (408 steps, about 6 minutes on 2 cores; the shared ``dino_cpu_checkpoint`` fixture):
  k-NN on mean-pooled patch tokens and dense-NN retrieval;
- SynCLR (396 steps, about 7 minutes): dense-NN retrieval by more than 1 mIoU (measured
  12.01 vs 9.53) and the cached-feature linear probe (15.00 vs 11.46). Its k-NN gains need
  the 3x schedule (1200 steps), too long for CI.
Slow: CI runs them with `pytest -m slow`."""
from pathlib import Path

import pytest

from experiments.learning_curve import evaluate_point, step0_model
from harness.data.synthetic import default_root, generate
from harness.models.handle import ModelHandle
from harness.running.suite import ModelEntry, pretrain_config, pretrained_checkpoint

pytestmark = pytest.mark.slow

# the learning curve's metrics (docs/BENCHMARKS.md, "Learning")
METRICS = ("knn_cls_top1", "knn_avgpool_top1", "dense_nn_miou")


def _synth_small() -> Path:
    return generate(default_root("small", 0), preset="small", seed=0, progress=False)


def _random_vs_trained(entry: ModelEntry, checkpoint: Path, root: Path, work: Path,
                       **evaluated) -> tuple[dict, dict, str]:
    """The metrics a test asserts (``evaluated``: evaluate_point's choice of k-NN features and
    linear probe) of the run's step-0 weights and of its checkpoint, and a table of both."""
    cfg, source = pretrain_config(entry, root, "synthscenes-small")
    random_init = evaluate_point(step0_model(cfg, work / "run", source), root, **evaluated)
    trained = evaluate_point(ModelHandle.from_checkpoint(checkpoint, name=entry.name), root, **evaluated)
    table = "\n".join(f"{m:>18}: random {random_init[m]:6.2f}  {entry.name} {trained[m]:6.2f}"
                      for m in (*METRICS, "linear_top1") if m in trained)
    print("\n" + table)
    return random_init, trained, table


def test_dino_cpu_preset_beats_random_init(tmp_path, dino_cpu_checkpoint):
    entry = ModelEntry(name="dino", pretrain="methods/dino_cpu.yaml")
    # Not measured here: the cached-feature linear probe, and k-NN on the [CLS] token, which at
    # 408 steps sits within one image of random init on the 12 object classes (one standard error
    # is 1.3 points; measured 8.96 vs 9.17 on one CPU and 10.42 vs 9.17 on another), so its sign
    # depends on the machine's float rounding, not on learning (`python -m
    # experiments.learning_curve` measures every metric).
    random_init, trained, table = _random_vs_trained(entry, dino_cpu_checkpoint, _synth_small(), tmp_path,
                                                     linear=False, knn_features=("avgpool",))
    for m in ("knn_avgpool_top1", "dense_nn_miou"):
        assert trained[m] > random_init[m], f"{m} did not improve:\n{table}"


def test_synclr_cpu_preset_beats_random_init_on_dense_nn_and_linear(tmp_path):
    root = _synth_small()
    entry = ModelEntry(name="synclr-cpu", pretrain="methods/synclr_cpu.yaml")
    checkpoint = pretrained_checkpoint(entry, root, "synthscenes-small", progress=False)
    # k-NN gains need the 3x schedule (module docstring): not measured here
    random_init, trained, table = _random_vs_trained(entry, checkpoint, root, tmp_path, knn_features=())
    assert trained["dense_nn_miou"] > random_init["dense_nn_miou"] + 1.0, f"dense NN gained <= 1 mIoU:\n{table}"
    assert trained["linear_top1"] > random_init["linear_top1"], f"linear probe did not improve:\n{table}"
