"""Device decisions of the CUDA, torchrun and SLURM paths, on a machine without a GPU: torch's
CUDA queries are monkeypatched to describe the GPUs, the decisions are the harness's."""
import json

import pytest
import torch

from harness.runtime import device as devices
from harness.runtime.device import DeviceError, resolve_device


@pytest.fixture
def fake_gpus(monkeypatch):
    """torch sees `n` GPUs of compute capability `cc` (set through the returned dict)."""
    gpus = {"n": 1, "cc": (9, 0), "asked": []}
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: gpus["n"])
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda d=None: "Fake GPU")
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: True)  # counts emulation

    def capability(d=None):
        gpus["asked"].append(d)
        return gpus["cc"]

    monkeypatch.setattr(torch.cuda, "get_device_capability", capability)
    monkeypatch.setattr(torch.cuda, "set_device", lambda d: None)
    for var in ("LOCAL_RANK", "WORLD_SIZE"):
        monkeypatch.delenv(var, raising=False)
    return gpus


def test_cuda_with_one_gpu_per_task_takes_local_rank_modulo_the_gpus_seen(fake_gpus, monkeypatch):
    # SLURM --gpus-per-task: each task sees one GPU, its LOCAL_RANK goes up to the tasks per node
    monkeypatch.setenv("WORLD_SIZE", "4")
    monkeypatch.setenv("LOCAL_RANK", "3")
    assert resolve_device("cuda") == torch.device("cuda", 0)
    assert resolve_device("auto") == torch.device("cuda", 0)
    fake_gpus["n"] = 2
    assert resolve_device("cuda") == torch.device("cuda", 1)


def test_cuda_n_is_refused_in_a_distributed_run(fake_gpus, monkeypatch):
    fake_gpus["n"] = 8
    assert resolve_device("cuda:1") == torch.device("cuda", 1)  # one process: fine
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("LOCAL_RANK", "0")
    with pytest.raises(DeviceError, match="use --device cuda"):
        resolve_device("cuda:1")


def test_bf16_is_refused_below_compute_capability_8_on_the_requested_gpu(fake_gpus):
    fake_gpus["cc"] = (7, 0)  # V100: torch.cuda.is_bf16_supported() says True (emulation)
    with pytest.raises(DeviceError, match="compute capability 7.0"):
        devices.check_precision("bf16", torch.device("cuda", 1))
    assert fake_gpus["asked"] == [torch.device("cuda", 1)]
    assert devices.check_precision("fp16", torch.device("cuda", 1)) == "fp16"
    fake_gpus["cc"] = (8, 0)
    assert devices.check_precision("bf16", torch.device("cuda", 0)) == "bf16"


@pytest.fixture(scope="module")
def tiny_model():
    """Built before the GPUs are faked (random_init forks the RNG of every GPU torch sees)."""
    from harness.models.handle import ModelHandle

    return ModelHandle.random_init("vit_cpu_tiny", seed=0)


@pytest.fixture
def tf32_flags():
    old = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    yield
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = old


@pytest.mark.parametrize("precision", ["fp32", "fp16", "bf16"])
def test_no_precision_leaves_tf32_on_for_later_work(fake_gpus, tf32_flags, precision):
    """The flags are process-wide: an fp16 pretraining that set them would turn the fp32
    evaluations after it (same process: suites, reproduce) into TF32."""
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True
    devices.prepare(torch.device("cuda", 0), precision)
    assert not torch.backends.cuda.matmul.allow_tf32 and not torch.backends.cudnn.allow_tf32
    assert devices.device_record(torch.device("cuda", 0), precision)["tf32"] is False


def test_tf32_is_in_the_feature_cache_key_and_the_record(tiny_model, fake_gpus, tf32_flags, monkeypatch):
    from harness.features import cache as feature_cache
    from harness.features import extract as features
    from harness.data.transforms import ResizeCenterCrop

    class Source:
        def __len__(self):
            return 2

        def load_image(self, i):
            raise AssertionError("not read")

        def fingerprint(self):
            return "two-images"

    monkeypatch.setattr(feature_cache, "content_stamp", lambda source: "stamp")
    model = tiny_model
    tf = ResizeCenterCrop(32, 32)
    cpu_key = features.feature_key(model, Source(), tf, 1, True, False, "float32")
    on_cpu = devices.module_device
    monkeypatch.setattr(devices, "module_device", lambda m: torch.device("cuda", 0))
    keys = {}
    for on in (False, True):
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = on
        keys[on] = features.feature_key(model, Source(), tf, 1, True, False, "float32")
        assert devices.device_record(torch.device("cuda", 0), "fp32")["tf32"] is on
    assert len({cpu_key, keys[False], keys[True]}) == 3
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    monkeypatch.setattr(devices, "module_device", on_cpu)
    assert features.feature_key(model, Source(), tf, 1, True, False, "float32") == cpu_key


def test_device_type_of_a_spec_asks_no_gpu(monkeypatch):
    """A SLURM login node without a GPU keys the GPU jobs' checkpoints as CUDA."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert devices.device_type("cuda") == devices.device_type("CUDA:3") == "cuda"
    assert devices.device_type("cpu") == devices.device_type("auto") == "cpu"
    assert devices.device_type(torch.device("cuda", 1)) == "cuda"
    with pytest.raises(DeviceError):
        devices.device_type("cuda:x")


def test_peak_gpu_memory_is_reset_before_each_measurement(tiny_model, fake_gpus, tf32_flags, monkeypatch,
                                                           tmp_path):
    devices.prepare(torch.device("cuda", 0))
    from harness.protocol_info import build_protocol
    from harness.running.evaluate import evaluate
    from harness.models.handle import ModelHandle
    from harness.protocol import ProtocolResult

    calls = []
    monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats", lambda d=None: calls.append(("reset", d)))
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda d=None: calls.append(("peak", d)) or 3 * 2**20)
    model = tiny_model
    monkeypatch.setattr(ModelHandle, "device", property(lambda self: torch.device("cuda", 0)))
    protocol = build_protocol("knn", "synth", {"dataset": "imagefolder"})
    monkeypatch.setattr(protocol, "run", lambda model, root: calls.append(("measure", None)) or [
        ProtocolResult(metrics={"top1": 1.0}, dataset="imagefolder", split="val")])
    monkeypatch.setattr(protocol, "request_hash", lambda: "req")
    (tmp_path / "data").mkdir()
    records, _ = evaluate(model, protocol, tmp_path / "data", runs_dir=tmp_path / "runs", force=True)
    assert [c[0] for c in calls] == ["reset", "measure", "peak"]
    assert records[0]["cost"]["peak_gpu_mb"] == 3.0 and records[0]["cost"]["tf32"] is False
    assert json.dumps(records[0])  # plain JSON
