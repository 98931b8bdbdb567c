"""'finetune' through the submitit launcher (harness.running.launch) with submitit's real local
executor: the job process imports this checkout, writes where the parent reads, sees the GPUs the
parent gives it; a suite's fine-tuning entry run as a job gives the in-process record."""
from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import pytest
import yaml

from harness.cli import main

pytest.importorskip("submitit")

TINY_FINETUNE = {"name": "finetune", "preset": "synth", "dataset": "imagefolder", "data_root": "{synth}/imagenet",
                 "set": {"epochs": 1, "batch_size": 8, "input_size": 32, "eval_batch_size": 64, "progress": False,
                         "save_checkpoint": True, "num_workers": 0}}
RANDOM_INIT = {"name": "random_init", "random_init": {"arch": "vit_cpu_tiny", "seed": 0}}


def _job_environment():
    """What a job process sees (pickled by value: it runs in the job's interpreter)."""
    import os

    import benchmarks.finetune
    import harness

    return {key: os.environ.get(key) for key in ("PYTHONPATH", "SSL_BENCH_HOME", "SSL_BENCH_RESULTS",
                                                 "CUDA_VISIBLE_DEVICES")} | {
        "harness": harness.__file__, "finetune": benchmarks.finetune.__file__}


@pytest.mark.slow  # a real job process: ~20 s on 2 cores
def test_a_local_job_imports_this_checkout_and_writes_where_the_parent_reads(tmp_path, monkeypatch):
    import cloudpickle

    from harness.paths import REPO_ROOT
    from harness.running.launch import LaunchOptions, make_executor

    monkeypatch.setenv("SSL_BENCH_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("SSL_BENCH_RESULTS", str(tmp_path / "results"))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")  # no GPU for this parent: none for its jobs
    executor = make_executor(LaunchOptions(cluster="local", job_dir=tmp_path / "jobs", time_min=10),
                             name="ssl-bench-finetune")
    assert executor.cluster == "local"
    cloudpickle.register_pickle_by_value(__import__(__name__))  # this module is not importable in the job
    try:
        got = executor.submit(_job_environment).result()
    finally:
        cloudpickle.unregister_pickle_by_value(__import__(__name__))
    assert got["PYTHONPATH"].split(":")[0] == str(REPO_ROOT)
    assert Path(got["harness"]).resolve().is_relative_to(REPO_ROOT)
    assert Path(got["finetune"]).resolve().is_relative_to(REPO_ROOT)
    assert (got["SSL_BENCH_HOME"], got["SSL_BENCH_RESULTS"]) == (str(tmp_path / "home"), str(tmp_path / "results"))
    assert got["CUDA_VISIBLE_DEVICES"] == ""


def _run_cli(argv: list[str], base: Path) -> tuple[int, str]:
    out = io.StringIO()
    with pytest.MonkeyPatch.context() as mp, contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        mp.setenv("SSL_BENCH_HOME", str(base / "home"))
        mp.setenv("SSL_BENCH_RESULTS", str(base / "results"))
        rc = main(argv)
    return rc, out.getvalue()


def _records(base: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted((base / "results" / "runs").glob("*.json"))]


@pytest.mark.slow  # a real job process (~20 s on 2 cores) and the same suite in process
def test_a_finetune_entry_launched_as_a_local_job_gives_the_in_process_record(tmp_path, synth_tiny):
    suite = tmp_path / "suite.yaml"
    suite.write_text(yaml.safe_dump({"synth": {"preset": "tiny", "seed": 0, "root": str(synth_tiny)},
                                     "pretrain_data": "{synth}", "models": [RANDOM_INIT],
                                     "protocols": [TINY_FINETUNE]}))
    rc, out = _run_cli(["run", str(suite), "--launcher", "local", "--no-progress", "--job-dir",
                        str(tmp_path / "jobs")], tmp_path / "launched")
    assert rc == 0, out
    jobs = [line for line in out.splitlines() if line.startswith("job ") and "; log " in line]
    assert len(jobs) == 1 and Path(jobs[0].rsplit("; log ", 1)[1]).is_file(), out
    rc_in, out_in = _run_cli(["run", str(suite), "--no-progress"], tmp_path / "inprocess")
    assert rc_in == 0, out_in
    [launched], [in_process] = _records(tmp_path / "launched"), _records(tmp_path / "inprocess")
    assert launched["protocol"]["name"] == "finetune" and launched["metrics"] == in_process["metrics"]
    assert launched["protocol"]["fingerprint"] == in_process["protocol"]["fingerprint"]
    checkpoint = Path(launched["protocol"]["params"]["checkpoint"])
    assert checkpoint.is_file() and checkpoint.is_relative_to(tmp_path / "launched" / "results")


def _suite(tmp_path: Path, synth_tiny: Path, values: dict) -> Path:
    entry = {**TINY_FINETUNE, "set": {**TINY_FINETUNE["set"], **values}}
    suite = tmp_path / f"suite-{len(list(tmp_path.glob('suite-*.yaml')))}.yaml"
    suite.write_text(yaml.safe_dump({"synth": {"preset": "tiny", "seed": 0, "root": str(synth_tiny)},
                                     "pretrain_data": "{synth}", "models": [RANDOM_INIT], "protocols": [entry]}))
    return suite


# the per-process random draws (mixup's lambda, drop path's masks) differ between 2 processes and 1
# process accumulating 2 micro-batches; the images' augmentations are seeded per image, alike
DRAWS_OFF = {"mixup": 0.0, "cutmix": 0.0, "drop_path": 0.0, "epochs": 2}


@pytest.mark.slow  # two job processes joined into one process group (~30 s on 2 cores) and the run in process
def test_a_two_task_finetune_job_gives_the_one_process_numbers_at_the_same_effective_batch(tmp_path, synth_tiny):
    from safetensors.torch import load_file
    from torch.testing import assert_close

    import torch

    two = _suite(tmp_path, synth_tiny, {**DRAWS_OFF, "update_freq": 1})  # 2 x 4 images per step
    one = _suite(tmp_path, synth_tiny, {**DRAWS_OFF, "update_freq": 2})  # 1 process, 2 micro-batches of 4
    threads = torch.get_num_threads()  # --threads 1 applies to this process too; restored after
    try:
        rc, out = _run_cli(["--threads", "1", "run", str(two), "--launcher", "local", "--tasks-per-node", "2",
                            "--no-progress", "--job-dir", str(tmp_path / "jobs")], tmp_path / "launched")
        rc_in, out_in = _run_cli(["--threads", "1", "run", str(one), "--no-progress"], tmp_path / "inprocess")
    finally:
        torch.set_num_threads(threads)
    assert rc == 0, out
    assert any(line.startswith("job ") and "(1 node(s) x 2 task(s))" in line for line in out.splitlines()), out
    assert rc_in == 0, out_in
    [second_task_log] = (tmp_path / "jobs").glob("*_1_log.out")
    assert "rank 1 of 2 (local rank 1)" in second_task_log.read_text()
    [launched], [alone] = _records(tmp_path / "launched"), _records(tmp_path / "inprocess")
    params = launched["protocol"]["params"]
    assert (params["world_size"], params["batch_per_device"], params["effective_batch"]) == (2, 4, 8)
    assert alone["protocol"]["params"]["world_size"] == 1 and alone["protocol"]["params"]["batch_per_device"] == 4
    assert launched["protocol"]["fingerprint"] == alone["protocol"]["fingerprint"]
    assert launched["metrics"] == pytest.approx(alone["metrics"], abs=1e-9)
    for a, b in zip(launched["protocol"]["params"]["history"], alone["protocol"]["params"]["history"]):
        assert a["top1"] == b["top1"] and a["loss"] == pytest.approx(b["loss"], rel=1e-5)
        assert a["train_loss"] == pytest.approx(b["train_loss"], rel=1e-5)  # over both processes' micro-batches
    # rank 0 alone wrote the checkpoint, the resume file and the record: the files of the one-process run
    def written(base: Path) -> list[str]:
        return sorted(p.name for p in (base / "results" / "runs" / "finetune").rglob("*") if p.is_file())

    assert written(tmp_path / "launched") == written(tmp_path / "inprocess")
    assert written(tmp_path / "launched").count("resume.pt") == 1 and len(_records(tmp_path / "launched")) == 1
    w_two, w_one = load_file(params["checkpoint"]), load_file(alone["protocol"]["params"]["checkpoint"])
    assert w_two.keys() == w_one.keys()
    for k in w_one:
        assert_close(w_two[k], w_one[k], rtol=1e-5, atol=1e-6)


def test_tasks_that_do_not_share_the_effective_batch_are_one_error_line_and_no_job(tmp_path, synth_tiny):
    suite = _suite(tmp_path, synth_tiny, {"update_freq": 1})  # 8 images a step over 3 processes
    rc, out = _run_cli(["run", str(suite), "--launcher", "local", "--tasks-per-node", "3", "--no-progress",
                        "--job-dir", str(tmp_path / "jobs")], tmp_path / "launched")
    assert rc == 2, out
    errors = [line for line in out.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "effective batch 8" in errors[0] and "3 process(es)" in errors[0], out
    assert not any(line.startswith("job ") for line in out.splitlines()), out
    assert not (tmp_path / "jobs").exists() or not any((tmp_path / "jobs").iterdir())
    assert _records(tmp_path / "launched") == []


def test_a_finetune_entry_is_one_requeued_job_of_the_launcher_tasks_and_other_entries_one_process(tmp_path,
                                                                                                  monkeypatch):
    """No SLURM here: submitit needs an `srun` on PATH to build the executor, and its sbatch writer
    shows what would be submitted."""
    import os
    import stat
    from types import SimpleNamespace

    from submitit.helpers import DelayedSubmission
    from submitit.slurm.slurm import _make_sbatch_string

    from harness.running import launch
    from harness.running.suite import ProtocolEntry

    srun = tmp_path / "bin" / "srun"
    srun.parent.mkdir()
    srun.write_text("#!/bin/sh\nexit 1\n")
    srun.chmod(srun.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{srun.parent}{os.pathsep}{os.environ['PATH']}")
    options = launch.LaunchOptions("slurm", tmp_path / "jobs", device="cuda", nodes=2, tasks_per_node=4)
    settings = launch.JobSettings("cuda")
    finetune = ProtocolEntry(**{**TINY_FINETUNE, "set": {**TINY_FINETUNE["set"], "update_freq": 1}})
    model = SimpleNamespace(name="random_init")
    spec = launch._evaluation_spec(model, finetune, None, "suite.yaml", options, False, False, settings)
    assert isinstance(spec.fn, launch.Requeueable) and spec.fn.fn is launch.distributed_evaluate_job
    script = _make_sbatch_string(command="true", folder=str(tmp_path / "jobs"), **spec.executor.parameters)
    for line in ("--nodes=2", "--ntasks-per-node=4", "--gpus-per-node=4", "--job-name=ssl-bench-finetune"):
        assert f"#SBATCH {line}\n" in script, line
    # preempted or timed out, the job is resubmitted with the same call: the run finds its resume.pt
    again = spec.fn.checkpoint(*spec.args)
    assert isinstance(again, DelayedSubmission) and again.function is spec.fn and again.args == spec.args
    knn = ProtocolEntry(name="knn", preset="synth", dataset="imagefolder", set={"ks": [5]})
    single = launch._evaluation_spec(model, knn, None, "suite.yaml", options, False, False, settings)
    assert single.fn is launch.evaluate_job and single.executor is None
