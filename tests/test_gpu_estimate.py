"""GPU-hours in the reproduce dry run: configs/gpus.yaml is complete and every figure says
where it comes from; an estimate is FLOPs / (peak x MFU); unknown GPUs fail with the known
names; the plan prints a GPU-hours column and a total."""
from __future__ import annotations

import pytest

from harness.cli import main as cli_main
from harness.errors import ConfigError
from harness.paper.gpus import PEAK_PRECISIONS, WORKLOADS, GpuChoice, find_gpu, load_gpus
from harness.running.reproduce import reproduce


def test_gpu_table_rows_and_provenance():
    gpus = load_gpus()
    assert {"H100", "H200", "A100", "V100", "L40S", "RTX4090"} <= set(gpus)
    for g in gpus.values():
        assert g.peak_tflops["fp32"] is not None, g.key
        for fig in [*(f for f in g.peak_tflops.values() if f is not None), *g.mfu.values()]:
            assert fig.kind == "stated" and fig.source, (g.key, fig)  # nothing is measured yet
        for p in ("fp16", "bf16"):
            if g.peak_tflops[p] is not None:
                assert g.peak_tflops[p].value > g.peak_tflops["fp32"].value, (g.key, p)
        assert set(g.mfu) == set(WORKLOADS) and all(0 < f.value <= 1 for f in g.mfu.values())
    # dense datasheet figures (with-sparsity figures are twice these)
    assert gpus["H100"].peak("fp32").value == 67.0 and gpus["H100"].peak("bf16").value == 989.5
    assert gpus["A100"].peak("tf32").value == 156.0 and gpus["A100"].peak("fp16").value == 312.0
    assert gpus["V100"].peak_tflops["bf16"] is None and gpus["V100"].peak_tflops["tf32"] is None
    assert set(gpus["H100"].peak_tflops) == set(PEAK_PRECISIONS)


def test_gpu_names_and_errors():
    assert find_gpu("rtx 4090").key == "RTX4090" and find_gpu("A100 80GB").key == "A100"
    assert find_gpu("h100-sxm").key == "H100"
    with pytest.raises(ConfigError) as exc:
        find_gpu("B200")
    msg = str(exc.value)
    assert "unknown GPU 'B200'" in msg and all(k in msg for k in ("H100", "H200", "A100", "V100", "L40S", "RTX4090"))
    with pytest.raises(ConfigError, match="no bf16 arithmetic.*--precision fp32 or fp16"):
        GpuChoice.of("V100", "bf16")
    with pytest.raises(ConfigError, match="GPU count"):
        GpuChoice.of("H100", "fp32", 0)


def test_gpu_table_checks_provenance(tmp_path):
    def write(fig):
        p = tmp_path / "gpus.yaml"
        p.write_text(f"""
gpus:
  X1:
    name: test GPU
    peak_tflops: {{fp32: {fig}}}
    mfu:
      forward: {{value: 0.5, kind: stated, source: test}}
      train: {{value: 0.25, kind: stated, source: test}}
""")
        return p

    g = find_gpu("x1", write("{value: 10.0, kind: measured, command: 'bench --gpu', date: '2026-01-02'}"))
    assert g.peak("fp32").provenance() == "measured 2026-01-02: bench --gpu"
    for bad, why in (("{value: 10.0, kind: measured, command: bench}", "command.*date"),
                     ("{value: 10.0, kind: stated}", "source"),
                     ("{value: 10.0, kind: guessed, source: x}", "stated' or 'measured"),
                     ("{value: -1, kind: stated, source: x}", "value must be")):
        with pytest.raises(ConfigError, match=why):
            load_gpus(write(bad))
    # the estimate is FLOPs / (peak x MFU), per workload kind
    choice = GpuChoice.of(g, "fp32", 4)
    hours = choice.gpu_hours({"forward": 3.6e16, "train": 3.6e16})
    assert hours == pytest.approx(3.6e16 / (10e12 * 0.5) / 3600 + 3.6e16 / (10e12 * 0.25) / 3600)
    assert choice.wall_hours(hours) == pytest.approx(hours / 4)


def test_dry_run_gpu_hours_known_rows(tmp_path, capsys):
    res = reproduce("cribo-table1", None, tmp_path / "zoo", dry_run=True)
    text = capsys.readouterr().out
    h100 = find_gpu("H100")
    job = next(j for j in res.jobs if j.zoo_name == "dino_vits16" and j.dataset == "voc")
    # dense_nn: forward only, at the default precision fp32 on the default GPU
    assert job.cost.flops_by_workload == {"forward": pytest.approx(job.cost.flops), "train": 0.0}
    assert job.gpu_hours == pytest.approx(job.cost.flops / (67.0e12 * h100.mfu["forward"].value) / 3600)
    header = next(line for line in text.splitlines() if line.lstrip().startswith("#"))
    assert "GPU-hours" in header and "wall h on 1" in header
    assert "total estimated GPU-hours:" in text and "(H100, fp32)" in text
    assert "precision fp32 (the protocols' default" in text and "stated: NVIDIA H100" in text
    total = sum(j.gpu_hours for j in res.jobs)
    assert f"total estimated GPU-hours: {total:.2f} (H100, fp32)" in text

    # Segmenter finetuning: the training crops run at the training MFU, validation at forward
    res = reproduce("cribo-table3", None, tmp_path / "zoo", dry_run=True, echo=None, gpu="A100",
                    precision="bf16", n_gpus=8)
    job = next(j for j in res.jobs if j.zoo_name == "dino_vits16" and j.dataset == "voc")
    a100 = find_gpu("A100")
    by = job.cost.flops_by_workload
    assert by["train"] > 0 and by["forward"] > 0 and by["train"] + by["forward"] == pytest.approx(job.cost.flops)
    peak = 312.0e12
    assert job.gpu_hours == pytest.approx((by["train"] / a100.mfu["train"].value
                                           + by["forward"] / a100.mfu["forward"].value) / peak / 3600)
    assert "wall h on 8" in res.text and "without an estimate not included" in res.text  # Pascal Context: n/a
    pc = next(j for j in res.jobs if j.dataset == "pascal_context")
    assert pc.gpu_hours is None


def test_reproduce_cli_gpu_flags(tmp_path, capsys):
    zoo = str(tmp_path / "zoo")
    assert cli_main(["reproduce", "dino-imagenet", "--dry-run", "--zoo-dir", zoo, "--gpu", "L40S",
                     "--precision", "bf16", "--gpus", "2"]) == 0
    out = capsys.readouterr().out
    assert "(L40S, bf16)" in out and "wall h on 2" in out and "peak 362.05 TFLOP/s dense" in out
    assert cli_main(["reproduce", "dino-imagenet", "--dry-run", "--zoo-dir", zoo, "--gpu", "TPUv5"]) == 2
    err = capsys.readouterr().err
    assert "unknown GPU 'TPUv5'" in err and "RTX4090" in err
