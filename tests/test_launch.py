"""Launching through submitit's real local executor (real subprocesses, no stand-ins): a suite
fanned out as jobs gives the in-process leaderboard, a failing job is reported while the
others finish, a rerun reuses what is done, and pretraining as one two-task job matches
one process."""
import contextlib
import io
import json
import os
import stat
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from harness.cli import main
from tiny_recipes import TINY_DINO

pytest.importorskip("submitit")

KNN = {"name": "knn", "preset": "synth", "dataset": "imagefolder", "data_root": "{synth}/imagenet",
       "set": {"ks": [5, 10], "progress": False}}
RANDOM_INIT = {"name": "random_init", "random_init": {"arch": "vit_cpu_tiny", "seed": 0}}


def _write_suite(path: Path, synth_root: Path, models: list, protocols: list) -> Path:
    suite = {"synth": {"preset": "tiny", "seed": 0, "root": str(synth_root)}, "pretrain_data": "{synth}",
             "models": models, "protocols": protocols}
    path.write_text(yaml.safe_dump(suite))
    return path


def _run_cli(argv: list[str], env: dict[str, str]) -> tuple[int, str]:
    """`ssl-bench ARGV` in this process with `env` set (submitit passes it on to the jobs)."""
    out = io.StringIO()
    with pytest.MonkeyPatch.context() as mp, contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        for key, value in env.items():
            mp.setenv(key, value)
        rc = main(argv)
    return rc, out.getvalue()


def _dirs(base: Path) -> dict[str, str]:
    return {"SSL_BENCH_HOME": str(base / "home"), "SSL_BENCH_RESULTS": str(base / "results")}


def _record_files(base: Path) -> dict[str, float]:
    return {p.name: p.stat().st_mtime_ns for p in (base / "results" / "runs").glob("*.json")}


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory, synth_tiny):
    """One suite (random init + a 2-step tiny DINO, x k-NN) run as local jobs and in process,
    each into its own caches and results."""
    tmp = tmp_path_factory.mktemp("launch")
    recipe = tmp / "tiny_dino.yaml"
    recipe.write_text(yaml.safe_dump(TINY_DINO))
    suite = _write_suite(tmp / "suite.yaml", synth_tiny,
                         [RANDOM_INIT, {"name": "dino_tiny", "pretrain": str(recipe), "set": ["train.max_steps=2"]}],
                         [KNN])
    launched_argv = ["run", str(suite), "--launcher", "local", "--no-progress", "--job-dir", str(tmp / "jobs")]
    launched = _run_cli(launched_argv, _dirs(tmp / "launched"))
    in_process = _run_cli(["run", str(suite), "--no-progress"], _dirs(tmp / "inprocess"))
    return {"tmp": tmp, "argv": launched_argv, "launched": launched, "in_process": in_process}


@pytest.mark.slow  # the shared fixture runs a suite twice (18 s); test_a_failing_job_* keeps jobs fast
def test_local_jobs_give_the_in_process_leaderboard(two_runs):
    tmp = two_runs["tmp"]
    (rc, out), (rc_in, out_in) = two_runs["launched"], two_runs["in_process"]
    assert rc == 0, out
    assert rc_in == 0, out_in
    # one pretraining job, then one evaluation job per model
    assert out.count("] dino_tiny: ") == 1 and "[dino_tiny] pretrained:" in out
    job_lines = [line for line in out.splitlines() if line.startswith("job ") and "; log " in line]
    assert len(job_lines) == 3, out
    for line in job_lines:
        assert Path(line.rsplit("; log ", 1)[1]).is_file()
    launched_csv = (tmp / "launched" / "results" / "leaderboard.csv").read_text()
    assert launched_csv == (tmp / "inprocess" / "results" / "leaderboard.csv").read_text()
    assert "dino_tiny" in launched_csv and "random_init" in launched_csv
    assert len(_record_files(tmp / "launched")) == len(_record_files(tmp / "inprocess")) == 4  # 2 models x 2 k


@pytest.mark.slow  # real subprocess jobs: ~20 s each on 2 cores
@pytest.mark.slow
def test_rerun_reuses_checkpoint_and_records(two_runs):
    tmp = two_runs["tmp"]
    before = _record_files(tmp / "launched")
    csv_before = (tmp / "launched" / "results" / "leaderboard.csv").read_text()
    rc, out = _run_cli(two_runs["argv"], _dirs(tmp / "launched"))
    assert rc == 0, out
    assert "[dino_tiny] using cached checkpoint" in out and "pretrained:" not in out
    assert out.count("record(s) (cached)") == 2, out
    assert _record_files(tmp / "launched") == before  # nothing rewritten
    assert (tmp / "launched" / "results" / "leaderboard.csv").read_text() == csv_before


@pytest.mark.slow  # real subprocess jobs: ~20 s each on 2 cores
def test_a_failing_job_is_reported_and_the_others_finish(tmp_path, synth_tiny):
    missing = {**KNN, "data_root": "{synth}/no_such_folder"}
    suite = _write_suite(tmp_path / "suite.yaml", synth_tiny, [RANDOM_INIT], [missing, KNN])
    rc, out = _run_cli(["run", str(suite), "--launcher", "local", "--no-progress",
                        "--job-dir", str(tmp_path / "jobs")], _dirs(tmp_path))
    assert rc == 1, out
    failed = [line for line in out.splitlines()
              if line.startswith("job ") and "FAILED: knn/synth on random_init" in line]
    assert len(failed) == 1, out
    job_id = failed[0].split()[1]
    summary = out.split("FAILED parts:", 1)[1]
    assert f"knn/synth on random_init (job {job_id}):" in summary and "no_such_folder" in summary
    pairs = json.loads((tmp_path / "results" / "pairs.json").read_text())
    assert [p["state"] for p in pairs] == ["failed", "measured"] and "no_such_folder" in pairs[0]["reason"]
    assert len(_record_files(tmp_path)) == 2  # the other job's records (k = 5, 10)
    assert (tmp_path / "results" / "leaderboard.csv").is_file()


def test_launcher_without_submitit_is_a_clear_error(tmp_path, monkeypatch):
    suite = tmp_path / "suite.yaml"
    suite.write_text(yaml.safe_dump({"models": [RANDOM_INIT], "protocols": []}))
    monkeypatch.setitem(sys.modules, "submitit", None)  # what `import submitit` meets when it is absent
    rc, out = _run_cli(["run", str(suite), "--launcher", "local"], _dirs(tmp_path))
    assert rc == 2 and "error:" in out and "pip install 'ssl-bench[cluster]'" in out


def test_slurm_options_reach_the_sbatch_script(tmp_path, monkeypatch):
    """No SLURM here: submitit only needs an `srun` on PATH to build the executor, and its own
    sbatch writer shows what would be submitted."""
    from submitit.slurm.slurm import _make_sbatch_string

    from harness.running.launch import LaunchOptions, make_executor, parse_slurm_extra

    srun = tmp_path / "bin" / "srun"
    srun.parent.mkdir()
    srun.write_text("#!/bin/sh\nexit 1\n")
    srun.chmod(srun.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{srun.parent}{os.pathsep}{os.environ['PATH']}")
    options = LaunchOptions("slurm", tmp_path / "jobs", partition="gpu", time_min=90, gpus_per_node=4,
                            cpus_per_task=10, mem_gb=64,
                            slurm_extra=parse_slurm_extra(["account=proj", "constraint=volta32gb"]))
    executor = make_executor(options, name="ssl-bench-pretrain-dino", nodes=2, tasks_per_node=4)
    script = _make_sbatch_string(command="true", folder=str(tmp_path / "jobs"), **executor.parameters)
    for line in ("--partition=gpu", "--time=90", "--nodes=2", "--ntasks-per-node=4", "--gpus-per-node=4",
                 "--cpus-per-task=10", "--mem=64GB", "--account=proj", "--constraint=volta32gb",
                 "--job-name=ssl-bench-pretrain-dino"):
        assert f"#SBATCH {line}\n" in script, line
    assert "export SSL_BENCH_RESULTS=" in script and "export PYTHONPATH=" in script


def _losses(out: Path) -> np.ndarray:
    return np.array([json.loads(line)["loss"] for line in (out / "log.jsonl").read_text().splitlines()])


@pytest.mark.slow  # real subprocess jobs: ~20 s each on 2 cores
def test_pretrain_as_a_two_task_local_job_matches_one_process(tmp_path, synth_tiny):
    """submitit's local executor starts tasks_per_node processes on this machine; each exports
    RANK / WORLD_SIZE / MASTER_ADDR from the job and trains under gloo."""
    recipe = tmp_path / "tiny_dino.yaml"
    recipe.write_text(yaml.safe_dump(TINY_DINO))
    common = ["--threads", "1", "pretrain", str(recipe), "--data-root", str(synth_tiny), "--no-progress",
              "--set", "train.max_steps=6"]
    env = {**_dirs(tmp_path), "OMP_NUM_THREADS": "1"}
    threads = torch.get_num_threads()  # --threads 1 applies to this process too; restored after
    try:
        rc_one, out_one = _run_cli(common + ["--out", str(tmp_path / "one")], env)
        rc, out = _run_cli(common + ["--out", str(tmp_path / "two"), "--launcher", "local",
                                     "--tasks-per-node", "2"], env)
    finally:
        torch.set_num_threads(threads)
    assert rc_one == 0, out_one
    assert rc == 0, out
    assert f"checkpoint: {tmp_path / 'two' / 'backbone.safetensors'}" in out
    l1, l2 = _losses(tmp_path / "one"), _losses(tmp_path / "two")
    assert len(l1) == len(l2) == 6
    # same global batch, same samples, averaged gradients: equal up to summation order
    np.testing.assert_allclose(l2, l1, rtol=1e-4, atol=1e-5)
    [second_task_log] = (tmp_path / "two" / "jobs").glob("*_1_log.out")
    assert "rank 1 of 2 (local rank 1)" in second_task_log.read_text()
