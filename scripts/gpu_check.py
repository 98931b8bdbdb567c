"""The GPU check: every method and protocol on a device, compared with the CPU on the same inputs.

    bash scripts/gpu_check.sh                        # on a GPU machine: cuda, AMP (fp16), < 5 min
    bash scripts/gpu_check.sh --device cpu --steps 4 # the dry run CI does (both sides on the CPU)

On SynthScenes "tiny" (generated into a temporary folder) it
1. pretrains each method for a few steps in fp32 on the CPU and on the device from the same
   seed, drop path off (timm draws its masks from each device's own generator), and compares
   the loss curves (strict fp32: TF32 off; the difference is summation order);
2. pretrains each method for --steps steps on the device in --precision (fp16 = autocast +
   gradient scaler, as the official --use_fp16), checks the losses stay finite and that the
   scaler let the optimiser step; DINO also in bf16 where the GPU has it, and resumed halfway
   against straight through;
3. with two or more GPUs, runs every method under `torchrun --nproc_per_node=2` (DDP, NCCL)
   against one process at the same global batch, and k-NN's sharded extraction against one process;
4. runs feature extraction, k-NN (also in fp16), dense NN, the linear probe (cached features
   and the augmented path) and, where mmseg is installed, the mmseg protocols on the CPU and
   on the device and compares features and metrics (after checking that TF32 is off).
Each check is caught on its own: one that raises is reported failed with its error and the
others still run. It prints one JSON summary (and writes it to --out): each check's numbers,
its tolerance and whether it passed; the exit code is 1 when any check failed.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

import numpy as np
import torch

from harness.runtime import device as devices
from harness.config import apply_overrides, load_config
from harness.training.engine import Trainer, load_pretrain_config

REPO = Path(__file__).resolve().parent.parent

METHODS = ("dino", "ibot", "cribo", "synclr")
# Tolerances, with why: fp32 on a GPU differs from the CPU by summation order only (TF32 off),
# which a few optimisation steps amplify a little.
LOSS_RTOL = 2e-3
FEATURE_ATOL = 1e-4
KNN_TOP1_ATOL = 100.0 / 12  # at most one val image of the 12 changes its vote
DENSE_MIOU_ATOL = 1.0
LINEAR_TOP1_ATOL = 100.0 / 12
FP16_FEATURE_ATOL = 5e-2  # fp16 features against fp32 ones: rounding of half precision
RESUME_RTOL = 1e-5  # resumed against straight through: the same arithmetic on one device


def tiny_pretrain_config(method: str, data: Path, device: str, precision: str, steps: int,
                         checkpoint_every: int = 10 ** 6):
    """The method's CPU preset, shrunk to SynthScenes tiny (48 images; SynCLR: 6 caption groups),
    drop path off: its masks come from each device's generator, so CPU and GPU runs would differ."""
    raw = apply_overrides(load_config(f"methods/{method}_cpu.yaml"), [
        "train.batch_size=8", "train.epochs=200", f"train.max_steps={steps}", "train.warmup_epochs=1",
        "train.num_workers=0", "train.log_every=1", f"train.checkpoint_every={checkpoint_every}",
        f"train.device={device}", f"train.precision={precision}", "backbone.drop_path_rate=0.0"])
    source = raw.pop("_source_")
    raw["data"] = {"root": str(data), "name": "synthscenes-tiny"}
    return load_pretrain_config(raw, source)


def pretrain_losses(method: str, data: Path, out: Path, device: str, precision: str, steps: int,
                    checkpoint_every: int = 10 ** 6):
    cfg = tiny_pretrain_config(method, data, device, precision, steps, checkpoint_every)
    t0 = time.perf_counter()
    trainer = Trainer(cfg, out, progress=False)
    ckpt = trainer.train()
    rows = [json.loads(line) for line in (out / "log.jsonl").read_text().splitlines()]
    return [r["loss"] for r in rows], time.perf_counter() - t0, ckpt, rows[-1].get("img_per_s"), trainer


def check(name: str, passed: bool, **numbers) -> dict:
    print(f"[{'ok' if passed else 'FAIL'}] {name} {json.dumps(numbers, default=float)}", file=sys.stderr)
    return {"check": name, "passed": bool(passed), **numbers}


def skipped(name: str, reason: str) -> dict:
    print(f"[skip] {name}: {reason}", file=sys.stderr)
    return {"check": name, "passed": True, "skipped": reason}


def guarded(name: str, run) -> list:
    """The check(s) `run()` returns; one failed check naming the error when it raises."""
    try:
        out = run()
    except Exception as exc:  # noqa: BLE001 - reported, the other checks go on
        return [check(name, False, error=f"{type(exc).__name__}: {exc}",
                      traceback=traceback.format_exc()[-2000:])]
    return out if isinstance(out, list) else [out]


def _max_rel(a, b) -> float:
    a, b = np.array(a), np.array(b)
    return float(np.max(np.abs(a - b) / np.maximum(np.abs(b), 1e-8)))


def method_checks(data: Path, work: Path, device: str, precision: str, steps: int, compare_steps: int) -> list:
    out = []
    for m in METHODS:
        def compare(m=m):
            cpu = pretrain_losses(m, data, work / f"{m}-cpu", "cpu", "fp32", compare_steps)[0]
            dev = pretrain_losses(m, data, work / f"{m}-dev32", device, "fp32", compare_steps)[0]
            rel = _max_rel(dev, cpu)
            return check(f"{m}: fp32 losses on {device} vs cpu", rel <= LOSS_RTOL, max_rel_diff=rel,
                         tolerance=LOSS_RTOL, cpu=cpu, device=dev)

        def mixed(m=m):
            losses, seconds, _, ips, trainer = pretrain_losses(m, data, work / f"{m}-amp", device, precision, steps)
            # the optimiser's own step count: a scaler that skips every step (inf gradients) leaves it at 0
            stepped = max((int(st["step"]) for st in trainer.optimizer.state.values() if "step" in st), default=0)
            ok = bool(np.all(np.isfinite(losses))) and stepped >= steps // 2
            return check(f"{m}: {steps} steps in {precision} on {device}", ok, first_loss=losses[0],
                         last_loss=losses[-1], optimizer_steps=stepped, scale=trainer.scaler.get_scale()
                         if trainer.scaler.is_enabled() else None, seconds=round(seconds, 2), img_per_s=ips)

        out += guarded(f"{m}: fp32 losses on {device} vs cpu", compare)
        out += guarded(f"{m}: {steps} steps in {precision} on {device}", mixed)
    return out


def bf16_check(data: Path, work: Path, device: torch.device, steps: int) -> dict:
    name = f"dino: {steps} steps in bf16 on {device}"
    try:
        devices.check_precision("bf16", device)
    except devices.DeviceError as exc:
        return skipped(name, str(exc))
    losses = pretrain_losses("dino", data, work / "dino-bf16", str(device), "bf16", steps)[0]
    return check(name, bool(np.all(np.isfinite(losses))), first_loss=losses[0], last_loss=losses[-1])


def resume_check(data: Path, work: Path, device: str, steps: int) -> dict:
    """Half the steps, a new Trainer resuming from resume.pt, the rest: equal to one run."""
    straight = pretrain_losses("dino", data, work / "resume-straight", device, "fp32", steps)[0]
    half = max(1, steps // 2)
    pretrain_losses("dino", data, work / "resume-split", device, "fp32", half, checkpoint_every=half)
    cfg = tiny_pretrain_config("dino", data, device, "fp32", steps, half)
    Trainer(cfg, work / "resume-split", progress=False).train()
    rows = [json.loads(x) for x in (work / "resume-split" / "log.jsonl").read_text().splitlines()]
    resumed = [r["loss"] for r in rows]
    rel = _max_rel(resumed, straight) if len(resumed) == len(straight) else float("inf")
    return check(f"dino: resumed after {half} of {steps} steps on {device} vs straight", rel <= RESUME_RTOL,
                 max_rel_diff=rel, tolerance=RESUME_RTOL)


def ddp_checks(data: Path, work: Path, compare_steps: int) -> list:
    if torch.cuda.device_count() < 2:
        reason = f"{torch.cuda.device_count()} GPU(s): needs 2"
        return [skipped(f"{m}: 2-GPU DDP vs 1 GPU", reason) for m in METHODS] + \
            [skipped("knn: sharded extraction on 2 GPUs vs 1", reason)]
    import yaml

    from harness.config import to_dict

    out = []
    for m in METHODS:
        def run(m=m):
            spec = to_dict(tiny_pretrain_config(m, data, "cuda", "fp32", compare_steps))
            spec.pop("data")
            path = work / f"{m}_ddp.yaml"
            path.write_text(yaml.safe_dump(spec))
            losses = {}
            for name, launcher in (("one", [sys.executable]), ("two", ["torchrun", "--nproc_per_node=2"])):
                o = work / f"ddp-{m}-{name}"
                r = subprocess.run(launcher + [str(REPO / "run_benchmark.py"), "pretrain", str(path), "--data-root",
                                               str(data), "--out", str(o), "--no-progress", "--device", "cuda"],
                                   capture_output=True, text=True, timeout=300)
                if r.returncode:
                    return check(f"{m}: 2-GPU DDP vs 1 GPU", False, stderr=r.stderr[-2000:])
                losses[name] = [json.loads(x)["loss"] for x in (o / "log.jsonl").read_text().splitlines()]
            rel = _max_rel(losses["two"], losses["one"])
            return check(f"{m}: 2-GPU DDP vs 1 GPU", rel <= LOSS_RTOL, max_rel_diff=rel, tolerance=LOSS_RTOL,
                         **losses)
        out += guarded(f"{m}: 2-GPU DDP vs 1 GPU", run)
    out += guarded("knn: sharded extraction on 2 GPUs vs 1", lambda: sharded_check(data, work))
    return out


def sharded_check(data: Path, work: Path) -> dict:
    """`eval --protocol knn` under torchrun 2 processes against one: same numbers."""
    numbers = {}
    for name, launcher in (("one", [sys.executable]), ("two", ["torchrun", "--nproc_per_node=2"])):
        env = dict(os.environ, SSL_BENCH_HOME=str(work / f"shard-{name}" / "home"),
                   SSL_BENCH_RESULTS=str(work / f"shard-{name}" / "results"))
        r = subprocess.run(launcher + [str(REPO / "run_benchmark.py"), "eval", "--protocol", "knn", "--preset", "synth",
                                       "--dataset", "imagefolder", "--set", "progress=false", "--set", "ks=[5]",
                                       "--random-init", "vit_cpu_tiny", "--data-root", str(data / "imagenet"),
                                       "--device", "cuda"], capture_output=True, text=True, timeout=300, env=env)
        if r.returncode:
            return check("knn: sharded extraction on 2 GPUs vs 1", False, stderr=r.stderr[-2000:])
        recs = [json.loads(p.read_text()) for p in (work / f"shard-{name}" / "results" / "runs").rglob("*.json")]
        numbers[name] = sorted(r["metrics"]["top1"] for r in recs)
    return check("knn: sharded extraction on 2 GPUs vs 1", numbers["one"] == numbers["two"], **numbers)


def protocol_checks(data: Path, checkpoint: Path, device: str) -> list:
    from harness.protocol_info import build_protocol
    from harness.features.extract import extract_features
    from harness.models.handle import ModelHandle

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
    protocols["linear_augmented"] = (build_protocol("linear", "synth", dict(
        dataset="imagefolder", epochs=1, cached_features=False, progress=False)), data / "imagenet", "top1",
        LINEAR_TOP1_ATOL)
    out = [check("TF32 off before the protocol checks", device == "cpu" or not devices.tf32_enabled(),
                 matmul=torch.backends.cuda.matmul.allow_tf32, cudnn=torch.backends.cudnn.allow_tf32)]
    cpu_model, dev_model = model_on("cpu"), model_on(device)
    proto = protocols["knn"][0]
    splits, _, _ = proto.extract(cpu_model, data / "imagenet")
    tf = proto.transform()

    def features(precision: str, tol: float):
        f_cpu = extract_features(cpu_model, splits.val, tf, cache=False, progress=False)
        f_dev = extract_features(dev_model, splits.val, tf, cache=False, progress=False, precision=precision)
        diff = float(np.max(np.abs(f_cpu.cls - f_dev.cls)))
        return check(f"features: cls in {precision} on {device} vs fp32 cpu", diff <= tol, max_abs_diff=diff,
                     tolerance=tol, device_stages=f_dev.stages)

    out += guarded(f"features: cls in fp32 on {device} vs fp32 cpu", lambda: features("fp32", FEATURE_ATOL))
    out += guarded(f"features: cls in fp16 on {device} vs fp32 cpu", lambda: features("fp16", FP16_FEATURE_ATOL))
    fp16_knn = build_protocol("knn", "synth", dict(knn, precision="fp16"))
    protocols["knn_fp16"] = (fp16_knn, data / "imagenet", "top1", 2 * KNN_TOP1_ATOL)
    for name, (protocol, root, metric, tol) in protocols.items():
        def run(name=name, protocol=protocol, root=root, metric=metric, tol=tol):
            numbers = {}
            for label, model in (("cpu", cpu_model), ("device", dev_model)):
                t0 = time.perf_counter()
                # the CPU side always in fp32: the reference
                p = protocols["knn"][0] if (name == "knn_fp16" and label == "cpu") else protocol
                results = p.run(model, root)
                numbers[label] = (float(results[0].metrics[metric]), round(time.perf_counter() - t0, 2))
            delta = abs(numbers["cpu"][0] - numbers["device"][0])
            return check(f"{name}: {metric} on {device} vs cpu", delta <= tol, cpu=numbers["cpu"][0],
                         device=numbers["device"][0], abs_diff=delta, tolerance=tol,
                         seconds={k: v[1] for k, v in numbers.items()},
                         device_record=results[0].params.get("search_device"))
        out += guarded(f"{name}: {metric} on {device} vs cpu", run)
    out += seg_checks(data, dev_model, device)
    return out


def seg_checks(data: Path, model, device: str) -> list:
    """The mmseg protocols on the device for a few iterations (mmengine puts them on the GPU)."""
    names = [f"{p}: mIoU on {device}" for p in ("seg_linear", "segmenter")]
    if not device.startswith("cuda"):
        return [skipped(n, "mmseg runs where mmengine puts it: checked on CUDA only") for n in names]
    try:
        import mmseg  # noqa: F401
    except ImportError:
        return [skipped(n, "mmseg is not installed (bash scripts/install_mmcv.sh)") for n in names]
    from harness.protocol_info import build_protocol

    out = []
    for protocol, name in zip(("seg_linear", "segmenter"), names):
        def run(protocol=protocol, name=name):
            proto = build_protocol(protocol, "synth", {"dataset": "synth_voc", "iters": 20})
            results = proto.run(model, data)
            miou = float(results[0].metrics["mIoU"])
            return check(name, bool(np.isfinite(miou)), mIoU=miou)
        out += guarded(name, run)
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
        checks += guarded(f"dino: bf16 on {device}", lambda: bf16_check(data, work, device, args.compare_steps))
        checks += guarded(f"dino: resume on {device}", lambda: resume_check(data, work, str(device),
                                                                          max(2, args.compare_steps)))
        checks += ddp_checks(data, work, args.compare_steps)
        # TF32 would survive an fp16 run only if something switched it on (harness.runtime.device never does)
        devices.prepare(device)
        checks += guarded("protocols", lambda: protocol_checks(
            data, work / "dino-dev32" / "backbone.safetensors", str(device)))
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
