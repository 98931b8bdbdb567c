"""One place resolves the device and precision; records state what did the work; DDP and
sharded extraction under torchrun equal one process. CI has no GPU: the CUDA paths are
exercised by scripts/gpu_check.py on a GPU machine, their decisions here."""
import json
import os
import shutil
import subprocess
import sys
from collections import namedtuple
from pathlib import Path

import numpy as np
import pytest
import torch

from harness.runtime import device as devices
from harness.runtime.device import DeviceError, device_record, resolve_device, to_device

REPO = Path(__file__).resolve().parent.parent
NO_GPU = not torch.cuda.is_available()


def test_auto_and_cpu_resolve_here():
    assert resolve_device("cpu") == torch.device("cpu")
    assert resolve_device(None) == resolve_device("auto")
    if NO_GPU:
        assert resolve_device("auto") == torch.device("cpu")


@pytest.mark.skipif(not NO_GPU, reason="checks the error on a machine without a GPU")
@pytest.mark.parametrize("spec", ["cuda", "cuda:0", "CUDA:1"])
def test_cuda_without_a_gpu_is_one_clear_error(spec):
    with pytest.raises(DeviceError, match="use --device cpu"):
        resolve_device(spec)


@pytest.mark.parametrize("spec", ["gpu", "cuda:x", "tpu:0", ""])
def test_malformed_device_specs_are_refused(spec):
    if spec == "":  # empty means auto
        assert resolve_device(spec).type in ("cpu", "cuda")
        return
    with pytest.raises(DeviceError):
        resolve_device(spec)


def test_precision_names_are_checked():
    if devices.cpu_kernel_failure("bf16") is None:
        assert devices.check_precision("bf16", torch.device("cpu")) == "bf16"
    else:  # scalar kernels (ATEN_CPU_CAPABILITY=default) cannot run bf16 attention: a known name, refused
        with pytest.raises(DeviceError, match="this CPU cannot run torch's bf16"):
            devices.check_precision("bf16", torch.device("cpu"))
    with pytest.raises(DeviceError, match="fp32, fp16, bf16"):
        devices.check_precision("fp8", torch.device("cpu"))


PACK_ERROR = "pack_vnni2 is only supported when avx512 is supported"


def test_the_cpu_kernel_probe_runs_once_per_process_and_reads_a_kernel_failure(monkeypatch):
    assert devices.cpu_kernel_failure("fp32") is None
    first = devices.cpu_kernel_failure("bf16")
    hits = devices.cpu_kernel_failure.cache_info().hits
    assert devices.cpu_kernel_failure("bf16") is first and devices.cpu_kernel_failure.cache_info().hits == hits + 1

    def packs_without_avx512(*a, **k):  # what an AMX Xeon raises under ATEN_CPU_CAPABILITY=default
        raise RuntimeError(PACK_ERROR + "\nException raised from pack_vnni2 at vec_half.h:114")

    with torch.inference_mode():  # the caller's grad mode does not decide the answer
        assert devices.cpu_kernel_failure.__wrapped__("bf16", backward=True) == devices.cpu_kernel_failure("bf16", True)
    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", packs_without_avx512)
    assert devices.cpu_kernel_failure.__wrapped__("bf16") == PACK_ERROR  # its first line
    assert devices.cpu_kernel_failure.__wrapped__("fp32") is None  # fp32 asks nothing of them


def test_a_cpu_that_cannot_run_a_precision_is_one_clear_refusal(monkeypatch):
    seen = []
    monkeypatch.setattr(devices, "cpu_kernel_failure", lambda p, backward=False: seen.append((p,
                                                                                              backward)) or PACK_ERROR)
    monkeypatch.setenv("ATEN_CPU_CAPABILITY", "default")
    with pytest.raises(DeviceError) as err:
        devices.prepare(torch.device("cpu"), "bf16", backward=True)
    msg = str(err.value)
    assert "\n" not in msg and PACK_ERROR in msg and "ATEN_CPU_CAPABILITY=default" in msg
    assert msg.endswith("use precision fp32 or unset ATEN_CPU_CAPABILITY") and seen == [("bf16", True)]
    assert devices.check_precision("fp32", torch.device("cpu")) == "fp32" and len(seen) == 1


def test_bf16_refused_by_the_cpu_is_one_error_line_from_eval_and_pretrain(isolated_home, synth_tiny, capsys,
                                                                          monkeypatch, tmp_path):
    import yaml

    from harness.cli import main
    from test_engine import TINY_DINO

    monkeypatch.setattr(devices, "cpu_kernel_failure", lambda p, backward=False: PACK_ERROR)
    cfg = tmp_path / "dino.yaml"
    cfg.write_text(yaml.safe_dump(TINY_DINO))
    runs = (KNN + ["--data-root", str(synth_tiny / "imagenet"), "--device", "cpu", "--set", "precision=bf16"],
            ["pretrain", str(cfg), "--data-root", str(synth_tiny), "--out", str(tmp_path / "o"), "--no-progress",
             "--device", "cpu", "--set", "train.precision=bf16", "--set", "train.max_steps=2"])
    for argv in runs:
        rc = main(argv)
        err = capsys.readouterr().err.strip().splitlines()
        assert rc == 2 and len(err) == 1 and err[0].startswith("error: precision bf16 was asked for on the CPU")
    runs_dir = isolated_home / "results" / "runs"
    assert not runs_dir.exists() or not any(runs_dir.iterdir())
    assert not (tmp_path / "o" / "backbone.safetensors").exists()


def test_autocast_is_off_for_fp32_and_on_for_half_precisions():
    x = torch.randn(4, 8)
    w = torch.randn(8, 8)
    with devices.autocast(torch.device("cpu"), "fp32"):
        assert (x @ w).dtype == torch.float32
    with devices.autocast(torch.device("cpu"), "bf16"):
        assert (x @ w).dtype == torch.bfloat16
    assert devices.grad_scaler(torch.device("cpu"), "fp16").is_enabled()
    assert not devices.grad_scaler(torch.device("cpu"), "bf16").is_enabled()


def test_to_device_moves_nested_tensors_and_keeps_the_rest():
    Pair = namedtuple("Pair", "a b")
    batch = {"crops": [torch.ones(2), torch.zeros(1)], "n": 3, "pair": Pair(torch.ones(1), None)}
    moved = to_device(batch, torch.device("cpu"))
    assert moved["n"] == 3 and isinstance(moved["pair"], Pair) and moved["pair"].b is None
    assert torch.equal(moved["crops"][0], batch["crops"][0])


def test_device_record_of_a_cpu_run():
    rec = device_record(torch.device("cpu"), "fp32", 1)
    assert rec["device"] == "cpu" and rec["device_type"] == "cpu" and rec["gpu"] is None
    assert rec["precision"] == "fp32" and rec["world_size"] == 1 and rec["threads"] >= 1


def test_model_handle_moves_to_a_device_spec():
    from harness.models.handle import ModelHandle

    m = ModelHandle.random_init("vit_cpu_tiny", seed=0).to("cpu")
    assert m.device == torch.device("cpu")


def _cli(*args, env=None, launcher=None):
    cmd = (launcher or [sys.executable]) + [str(REPO / "run_benchmark.py"), "--threads", "1", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=600,
                          env=dict(os.environ, OMP_NUM_THREADS="1", **(env or {})))


KNN = ["eval", "--protocol", "knn", "--preset", "synth", "--dataset", "imagefolder", "--set", "progress=false",
       "--set", "ks=[1,5]", "--random-init", "vit_cpu_tiny"]


@pytest.mark.skipif(not NO_GPU, reason="checks the error on a machine without a GPU")
def test_eval_on_cuda_without_a_gpu_fails_with_one_error_line(isolated_home, synth_tiny, capsys):
    from harness.cli import main

    rc = main(KNN + ["--data-root", str(synth_tiny / "imagenet"), "--device", "cuda"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and err[0].startswith("error: device 'cuda'")
    assert not (isolated_home / "results" / "runs").exists() or not any((isolated_home / "results" / "runs").iterdir())


def test_a_cpu_record_says_cpu_and_the_precision_it_ran(isolated_home, synth_tiny, capsys):
    from harness.results import records as results
    from harness.cli import main

    assert main(KNN + ["--data-root", str(synth_tiny / "imagenet"), "--device", "cpu"]) == 0
    recs = list(results.iter_records())
    assert recs
    for r in recs:
        assert r["cost"]["device"] == "cpu" and r["cost"]["gpu"] is None
        assert r["cost"]["precision"] == "fp32" and r["cost"]["world_size"] == 1
        assert r["protocol"]["params"]["search_device"] == "cpu"
        assert r["protocol"]["params"]["backend"] == "faiss"


def test_evaluation_precision_is_part_of_the_fingerprint():
    from benchmarks.dense_nn.protocol import DenseNN
    from benchmarks.classification.knn import KNNProtocol

    for cls in (KNNProtocol, DenseNN):
        fps = {cls.from_preset(None, {"precision": p}).fingerprint() for p in ("fp32", "fp16", "bf16")}
        assert len(fps) == 3


def test_search_on_the_device_equals_faiss_on_cpu():
    from benchmarks.classification.knn import cosine_topk

    g = torch.Generator().manual_seed(0)
    train, test = torch.randn(300, 16, generator=g), torch.randn(40, 16, generator=g)
    v1, i1 = cosine_topk(train, test, 7, backend="faiss", train_chunk=128)
    v2, i2 = cosine_topk(train, test, 7, backend="torch", train_chunk=128, device="cpu")
    assert torch.equal(i1, i2)
    torch.testing.assert_close(v1, v2, atol=1e-6, rtol=0)


def test_shards_cover_every_image_once_in_order():
    from harness.features.extract import shard_bounds

    for n in (0, 1, 5, 13, 64):
        for world in (1, 2, 3, 8):
            bounds = [shard_bounds(n, world, r) for r in range(world)]
            assert bounds[0][0] == 0 and bounds[-1][1] == n
            assert all(a[1] == b[0] for a, b in zip(bounds, bounds[1:]))
            sizes = [b - a for a, b in bounds]
            assert max(sizes) - min(sizes) <= 1


def test_trainer_wraps_the_method_in_distributed_data_parallel(tmp_path, synth_tiny, monkeypatch):
    """A one-process gloo group is enough to see the engine use torch's DDP (not a hand-made
    all-reduce) and the checkpoint record what trained it."""
    import torch.distributed as tdist
    from torch.nn.parallel import DistributedDataParallel

    from harness.training.engine import Trainer, load_pretrain_config
    from test_engine import TINY_DINO

    monkeypatch.setenv("SSL_BENCH_HOME", str(tmp_path / "home"))
    tdist.init_process_group("gloo", init_method=f"file://{tmp_path / 'rdzv'}", rank=0, world_size=1)
    try:
        cfg = load_pretrain_config({**TINY_DINO, "train": {**TINY_DINO["train"], "max_steps": 2},
                                    "data": {"root": str(synth_tiny)}}, "<test>")
        trainer = Trainer(cfg, tmp_path / "out", progress=False)
        assert isinstance(trainer.model, DistributedDataParallel) and trainer.device.type == "cpu"
        ckpt = trainer.train()
    finally:
        tdist.destroy_process_group()
    meta = json.loads(Path(ckpt).with_suffix(".json").read_text())
    [on] = meta["trained_on"]
    assert on["device"] == "cpu" and on["world_size"] == 1 and on["precision"] == "fp32"
    assert (on["from_step"], on["to_step"]) == (0, 2)


@pytest.mark.slow  # end to end (seconds); CI runs it with the slow suite
@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_half_precision_pretraining_runs_and_logs_the_data_share(tmp_path, synth_tiny, precision):
    import yaml

    failure = devices.cpu_kernel_failure(precision, backward=True)
    if failure:
        pytest.skip(f"this CPU cannot run torch's {precision} kernels here: {failure}")

    from test_engine import TINY_DINO

    cfg = tmp_path / "dino.yaml"
    cfg.write_text(yaml.safe_dump(TINY_DINO))
    r = _cli("pretrain", str(cfg), "--data-root", str(synth_tiny), "--out", str(tmp_path / "o"), "--no-progress",
             "--device", "cpu", "--set", f"train.precision={precision}", "--set", "train.max_steps=3",
             env={"SSL_BENCH_HOME": str(tmp_path / "home")})
    assert r.returncode == 0, r.stderr
    rows = [json.loads(x) for x in (tmp_path / "o" / "log.jsonl").read_text().splitlines()]
    assert len(rows) == 3 and all(np.isfinite(row["loss"]) for row in rows)
    assert 0.0 <= rows[-1]["data_wait_share"] <= 1.0 and rows[-1]["img_per_s"] > 0
    meta = json.loads((tmp_path / "o" / "backbone.json").read_text())
    assert [on["precision"] for on in meta["trained_on"]] == [precision]


@pytest.mark.xdist_group("torchrun_port_29531")  # one master port: never two at once
@pytest.mark.slow  # 14 s of torchrun; the fast suite keeps the one-process path (CI runs both)
@pytest.mark.skipif(shutil.which("torchrun") is None, reason="torchrun not on PATH")
def test_two_rank_sharded_knn_extraction_equals_one_rank(tmp_path, synth_tiny):
    """torchrun --nproc_per_node=2 eval --protocol knn: each rank extracts half the images,
    rank 0 joins them; features and every k-NN number equal one process."""
    data = str(synth_tiny / "imagenet")
    runs = {}
    for name, launcher in (("one", None), ("two", ["torchrun", "--nproc_per_node=2", "--master_port=29531"])):
        home = tmp_path / name
        r = _cli(*KNN, "--data-root", data, "--device", "cpu", launcher=launcher,
                 env={"SSL_BENCH_HOME": str(home / "home"), "SSL_BENCH_RESULTS": str(home / "results")})
        assert r.returncode == 0, r.stderr + r.stdout
        recs = [json.loads(p.read_text()) for p in sorted((home / "results" / "runs").rglob("*.json"))]
        runs[name] = (home, recs)
    one, two = runs["one"][1], runs["two"][1]
    assert len(one) == len(two) == 2  # one record per k, written once (by rank 0)
    assert [r["metrics"] for r in one] == [r["metrics"] for r in two]
    assert [r["cost"]["world_size"] for r in two] == [2, 2]
    dirs = {n: sorted(p.parent for p in (h / "home").rglob("meta.json")) for n, (h, _) in runs.items()}
    assert len(dirs["one"]) == len(dirs["two"]) == 2  # train and val features
    for d1, d2 in zip(dirs["one"], dirs["two"]):
        assert d1.name == d2.name  # the same cache key
        for arr in ("cls.npy", "patch_mean.npy", "grids.npy"):
            np.testing.assert_array_equal(np.load(d1 / arr), np.load(d2 / arr))
        assert json.loads((d2 / "meta.json").read_text())["shards"] == 2
    assert not list((runs["two"][0] / "home").rglob(".*shards*"))  # staging cleaned up
