"""The SLURM launcher as a login node without a GPU runs it: keys of the GPU jobs' checkpoints,
the GPUs and CPUs each job asks for, and requeueing after a time-out."""
import pickle

import pytest
import torch

pytest.importorskip("submitit")

from harness.running import launch  # noqa: E402
from harness.running.launch import LaunchOptions  # noqa: E402
from harness.running.suite import ModelEntry, SuiteData, cached_checkpoint  # noqa: E402
from harness.training.cached_pretrain import checkpoint_plan  # noqa: E402


@pytest.fixture
def login_node(monkeypatch, tmp_path):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setenv("SSL_BENCH_HOME", str(tmp_path / "home"))
    return tmp_path


def _slurm(tmp_path, **kw) -> LaunchOptions:
    return LaunchOptions(cluster="slurm", job_dir=tmp_path / "jobs", **kw)


def test_cuda_jobs_find_their_cached_checkpoint_from_a_node_without_a_gpu(login_node, synth_tiny):
    from harness.context.supervised import SupervisedSpec, checkpoint_dir

    entry = ModelEntry(name="dino", pretrain="methods/dino_cpu.yaml")
    data = SuiteData(None, synth_tiny, "tiny")
    assert cached_checkpoint(entry, synth_tiny, "tiny", "cuda") is None  # no DeviceError here
    gpu_dir, cpu_dir = (checkpoint_plan(entry, synth_tiny, "tiny", d)[2] for d in ("cuda", "cpu"))
    assert gpu_dir != cpu_dir
    (gpu_dir / "backbone.safetensors").parent.mkdir(parents=True)
    (gpu_dir / "backbone.safetensors").write_bytes(b"")
    logged = []
    for device, gpus in (("cuda", 1), ("auto", 1)):  # auto on SLURM: the jobs ask for GPUs
        failed = launch._pretrain_stage(None, [entry], data, _slurm(login_node, device=device, gpus_per_node=gpus),
                                        False, [], logged.append)
        assert not failed and "using cached checkpoint" in logged[-1]
    assert checkpoint_dir(SupervisedSpec(), synth_tiny, "cuda") != checkpoint_dir(SupervisedSpec(), synth_tiny, "cpu")


def test_auto_is_fixed_once_for_every_job(login_node):
    assert _slurm(login_node, gpus_per_node=2).job_device() == "cuda"
    assert _slurm(login_node, slurm_extra={"gres": "gpu:1"}).job_device() == "cuda"
    assert _slurm(login_node).job_device() == "cpu"
    assert _slurm(login_node, device="cuda:0").job_device() == "cuda:0"
    assert LaunchOptions(cluster="local", job_dir=login_node).job_device() == "cpu"


def _sbatch(executor) -> str:
    return executor._executor._make_submission_file_text("echo", "UID")


def test_suite_jobs_ask_for_one_gpu_and_ten_cpus(login_node, monkeypatch):
    monkeypatch.setattr("shutil.which", lambda name: f"/usr/bin/{name}")  # sbatch "on PATH"
    options = _slurm(login_node, device="cuda")
    text = _sbatch(launch.make_executor(options, "suite", gpus_per_node=launch._suite_job_gpus(options)))
    assert "--gpus-per-node=1" in text and "--cpus-per-task=10" in text and "--ntasks-per-node=1" in text
    with pytest.raises(launch.SslBenchError, match="one process on one GPU"):
        launch._suite_job_gpus(_slurm(login_node, device="cuda", gpus_per_node=4))
    assert "--cpus-per-task=4" in _sbatch(launch.make_executor(_slurm(login_node, cpus_per_task=4), "s"))


def test_pretraining_job_is_requeued_after_a_time_out(login_node, monkeypatch, tmp_path):
    """submitit requeues a job whose function has `checkpoint` (Checkpointable's protocol);
    the resubmitted call resumes from resume.pt."""
    from submitit.helpers import DelayedSubmission

    specs = []
    monkeypatch.setattr(launch, "make_executor", lambda *a, **k: None)
    monkeypatch.setattr(launch, "run_jobs", lambda ex, s, *a, **k: specs.extend(s) or [None])
    launch.launch_pretrain(_Cfg(), tmp_path / "out", "cfg.yaml", _slurm(login_node, gpus_per_node=2))
    [spec] = specs
    assert hasattr(spec.fn, "checkpoint")
    again = spec.fn.checkpoint(*spec.args)
    assert isinstance(again, DelayedSubmission) and again.function is spec.fn and again.args == spec.args
    assert pickle.loads(pickle.dumps(spec.fn)).fn is launch.distributed_pretrain_job


class _Cfg:
    method = {"name": "dino"}
