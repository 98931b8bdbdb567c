"""The GPU check: every method and protocol on a device, compared with the CPU on the same inputs.

    bash scripts/gpu_check.sh                        # on a GPU machine: cuda, AMP (fp16), < 5 min
    bash scripts/gpu_check.sh --device cpu --steps 4 # the dry run CI does (both sides on the CPU)

On SynthScenes "tiny" (generated into a temporary folder) it
1. pretrains each method for a few steps in fp32 on the CPU and on the device from the same
   seed and compares the loss curves (strict fp32: TF32 off; the difference is summation order);
2. pretrains each method for --steps steps on the device in --precision (fp16 = autocast +
   gradient scaler, as the official --use_fp16) and checks the losses stay finite;
3. with two or more GPUs, runs DINO under `torchrun --nproc_per_node=2` (DDP, NCCL) and
   compares it with one process at the same global batch;
4. runs feature extraction, k-NN, dense NN and the linear probe on the CPU and on the device
   and compares features and metrics.
It prints one JSON summary (and writes it to --out): each check's numbers, its tolerance and
whether it passed; the exit code is 1 when any check failed.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from harness import device as devices
from harness.config import apply_overrides, load_config
from harness.engine import Trainer, load_pretrain_config

REPO = Path(__file__).resolve().parent.parent

METHODS = ("dino", "ibot", "cribo", "synclr")
# Tolerances, with why: fp32 on a GPU differs from the CPU by summation order only (TF32 off),
# which a few optimisation steps amplify a little.
LOSS_RTOL = 2e-3
FEATURE_ATOL = 1e-4
KNN_TOP1_ATOL = 100.0 / 12  # at most one val image of the 12 changes its vote
DENSE_MIOU_ATOL = 1.0
LINEAR_TOP1_ATOL = 100.0 / 12


def tiny_pretrain_config(method: str, data: Path, device: str, precision: str, steps: int):
    """The method's CPU preset, shrunk to SynthScenes tiny (48 images; SynCLR: 6 caption groups)."""
    raw = apply_overrides(load_config(f"methods/{method}_cpu.yaml"), [
        "train.batch_size=8", "train.epochs=200", f"train.max_steps={steps}", "train.warmup_epochs=1",
        "train.num_workers=0", "train.log_every=1", f"train.checkpoint_every={10 ** 6}",
        f"train.device={device}", f"train.precision={precision}"])
    source = raw.pop("_source_")
    raw["data"] = {"root": str(data), "name": "synthscenes-tiny"}
    return load_pretrain_config(raw, source)


def pretrain_losses(method: str, data: Path, out: Path, device: str, precision: str, steps: int):
    cfg = tiny_pretrain_config(method, data, device, precision, steps)
    t0 = time.perf_counter()
    trainer = Trainer(cfg, out, progress=False)
    ckpt = trainer.train()
    rows = [json.loads(line) for line in (out / "log.jsonl").read_text().splitlines()]
    return [r["loss"] for r in rows], time.perf_counter() - t0, ckpt, rows[-1].get("img_per_s")


def check(name: str, passed: bool, **numbers) -> dict:
    print(f"[{'ok' if passed else 'FAIL'}] {name} {json.dumps(numbers, default=float)}", file=sys.stderr)
    return {"check": name, "passed": bool(passed), **numbers}


def method_checks(data: Path, work: Path, device: str, precision: str, steps: int, compare_steps: int) -> list:
    out = []
    for m in METHODS:
        cpu, _, _, _ = pretrain_losses(m, data, work / f"{m}-cpu", "cpu", "fp32", compare_steps)
        dev, _, _, _ = pretrain_losses(m, data, work / f"{m}-dev32", device, "fp32", compare_steps)
        rel = float(np.max(np.abs(np.array(dev) - np.array(cpu)) / np.maximum(np.abs(cpu), 1e-8)))
        out.append(check(f"{m}: fp32 losses on {device} vs cpu", rel <= LOSS_RTOL, max_rel_diff=rel,
                         tolerance=LOSS_RTOL, cpu=cpu, device=dev))
        losses, seconds, _, ips = pretrain_losses(m, data, work / f"{m}-amp", device, precision, steps)
        out.append(check(f"{m}: {steps} steps in {precision} on {device}", bool(np.all(np.isfinite(losses))),
                         first_loss=losses[0], last_loss=losses[-1], seconds=round(seconds, 2), img_per_s=ips))
    return out


def ddp_check(data: Path, work: Path, compare_steps: int) -> dict:
    if torch.cuda.device_count() < 2:
        return {"check": "dino: 2-GPU DDP vs 1 GPU", "passed": True, "skipped": "fewer than 2 GPUs"}
    cfg = tiny_pretrain_config("dino", data, "cuda", "fp32", compare_steps)
    path = work / "dino_ddp.yaml"
    from harness.config import to_dict

    import yaml

    spec = to_dict(cfg)
    spec.pop("data")
    path.write_text(yaml.safe_dump(spec))
    losses = {}
    for name, launcher in (("one", [sys.executable]), ("two", ["torchrun", "--nproc_per_node=2"])):
        out = work / f"ddp-{name}"
        r = subprocess.run(launcher + [str(REPO / "run_benchmark.py"), "pretrain", str(path), "--data-root", str(data),
                                       "--out", str(out), "--no-progress", "--device", "cuda"],
                           capture_output=True, text=True, timeout=300)
        if r.returncode:
            return check("dino: 2-GPU DDP vs 1 GPU", False, stderr=r.stderr[-2000:])
        losses[name] = [json.loads(x)["loss"] for x in (out / "log.jsonl").read_text().splitlines()]
    rel = float(np.max(np.abs(np.array(losses["two"]) - losses["one"]) / np.abs(losses["one"])))
    return check("dino: 2-GPU DDP vs 1 GPU", rel <= LOSS_RTOL, max_rel_diff=rel, tolerance=LOSS_RTOL, **losses)


def protocol_checks(data: Path, checkpoint: Path, device: str) -> list:
    from harness.evaluate import build_protocol
    from harness.features import extract_features
    from harness.models import ModelHandle

    def model_on(dev: str):
        return ModelHandle.from_checkpoint(checkpoint, name="dino-tiny").to(dev)

    knn = dict(dataset="imagefolder", ks=[5], progress=False)
    protocols = {
        "knn": (build_protocol("knn", "synth", knn), data / "imagenet", "top1", KNN_TOP1_ATOL),
        "dense_nn": (build_protocol("dense_nn", "cribo", dict(dataset="voc", train_split="train",
                                                                 fractions=["1/1"], seeds=[42], progress=False)),
                     data, "mIoU", DENSE_MIOU_ATOL),
        "linear": (build_protocol("linear", "synth", dict(dataset="imagefolder", epochs=2, cached_features=True,
                                                           progress=False)),
                   data / "imagenet", "top1", LINEAR_TOP1_ATOL),
    }
    out = []
    cpu_model, dev_model = model_on("cpu"), model_on(device)
    proto = protocols["knn"][0]
    splits, _, _ = proto.extract(cpu_model, data / "imagenet")
    tf = proto.transform()
    f_cpu = extract_features(cpu_model, splits.val, tf, cache=False, progress=False)
    f_dev = extract_features(dev_model, splits.val, tf, cache=False, progress=False)
    diff = float(np.max(np.abs(f_cpu.cls - f_dev.cls)))
    out.append(check(f"features: cls on {device} vs cpu", diff <= FEATURE_ATOL, max_abs_diff=diff,
                     tolerance=FEATURE_ATOL, device_stages=f_dev.stages))
    for name, (protocol, root, metric, tol) in protocols.items():
        numbers = {}
        for label, model in (("cpu", cpu_model), ("device", dev_model)):
            t0 = time.perf_counter()
            results = protocol.run(model, root)
            numbers[label] = (float(results[0].metrics[metric]), round(time.perf_counter() - t0, 2))
        delta = abs(numbers["cpu"][0] - numbers["device"][0])
        out.append(check(f"{name}: {metric} on {device} vs cpu", delta <= tol, cpu=numbers["cpu"][0],
                         device=numbers["device"][0], abs_diff=delta, tolerance=tol,
                         seconds={k: v[1] for k, v in numbers.items()},
                         device_record=results[0].params.get("search_device")))
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--device", default="cuda", help="the device under test (cpu = a dry run)")
    p.add_argument("--precision", default=None, help="mixed precision of the long runs (default: fp16 "
                                                       "on cuda as the official --use_fp16, fp32 on cpu)")
    p.add_argument("--steps", type=int, default=50, help="steps per method in --precision")
    p.add_argument("--compare-steps", type=int, default=5, help="fp32 steps compared with the CPU")
    p.add_argument("--out", default=None, help="also write the JSON summary here")
    args = p.parse_args(argv)
    device = devices.prepare(devices.resolve_device(args.device))
    precision = args.precision or ("fp16" if device.type == "cuda" else "fp32")
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="ssl-bench-gpu-check-") as tmp:
        work = Path(tmp)
        os.environ["SSL_BENCH_HOME"] = str(work / "home")
        os.environ["SSL_BENCH_RESULTS"] = str(work / "results")
        from harness.data.synthetic import generate

        data = generate(work / "synth", preset="tiny", seed=0, progress=False)
        checks = method_checks(data, work, str(device), precision, args.steps, args.compare_steps)
        checks.append(ddp_check(data, work, args.compare_steps))
        checks += protocol_checks(data, work / "dino-dev32" / "backbone.safetensors", str(device))
    summary = {"device": devices.device_record(device, precision), "torch": torch.__version__,
               "seconds": round(time.perf_counter() - t0, 1), "passed": all(c["passed"] for c in checks),
               "checks": checks}
    text = json.dumps(summary, indent=1, default=float)
    print(text)
    if args.out:
        Path(args.out).write_text(text)
    return 0 if summary["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
