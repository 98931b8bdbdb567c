"""bf16 fidelity report: k-NN top-1 and dense-NN mIoU on SynthScenes-small, fp32 vs bf16.

    python -m experiments.bf16_fidelity [--checkpoint CKPT] [--random-init] [--keep-cache]
        [--device cpu|cuda|cuda:N] [--half bf16|fp16]

On a GPU (--device cuda) the same report holds for the GPU's bf16 or fp16 (--half) against its
strict fp32 (TF32 off).

The bf16 extraction mode (precision="bf16": torch.autocast to bfloat16 around the forward)
may be used only where this report shows both metrics within --tolerance (0.1 point) of
fp32. Protocols: harness.protocol_info.build_protocol("knn", "synth", ...) (top-1 at every k)
and build_protocol("dense_nn", "cribo", ...) on the VOC layout (fraction 1/1). Models: the
newest pretrained checkpoint under <ssl-bench home>/checkpoints/*/backbone.safetensors (if
any) and the random-init vit_cpu_tiny baseline. Features are extracted afresh into a
temporary cache (so the times are real) unless --keep-cache. Also printed: the cosine
similarity of the fp32 and bf16 CLS features of the k-NN val images, and the wall time of
each run (bf16 is emulated, so slower, on CPUs without AVX512-BF16 / AMX).
"""
from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

TOLERANCE = 0.1  # points


def find_checkpoint() -> Path | None:
    from harness.paths import checkpoint_cache_dir

    found = sorted(checkpoint_cache_dir().glob("*/backbone.safetensors"), key=lambda p: p.stat().st_mtime)
    return found[-1] if found else None


def _knn(model, root: Path, precision: str) -> tuple[dict, float]:
    from harness.protocol_info import build_protocol

    proto = build_protocol("knn", "synth", {"precision": precision, "progress": False})
    t = time.perf_counter()
    res = proto.run(model, root / "imagenet")  # SynthScenes' object-centric ImageFolder
    return {int(r.variant["k"]): float(r.metrics["top1"]) for r in res}, time.perf_counter() - t


def _dense(model, root: Path, precision: str) -> tuple[float, float]:
    from harness.protocol_info import build_protocol

    proto = build_protocol("dense_nn", "cribo", {"dataset": "voc", "fractions": ["1/1"], "seeds": [42],
                                                  "precision": precision, "progress": False,
                                                  "write_subsets": False})
    t = time.perf_counter()
    res = proto.run(model, root)
    return float(res[0].metrics["mIoU"]), time.perf_counter() - t


def _cls_cosine(model, root: Path, half: str = "bf16") -> tuple[float, float, int]:
    """Cosine similarity of fp32 vs half-precision CLS features of the k-NN val images (cache hits)."""
    from harness.probes.labelled_features import load_splits
    from harness.protocol_info import build_protocol
    from harness.features.extract import extract_features

    proto = build_protocol("knn", "synth", {"progress": False})
    c = proto.cfg
    val = load_splits(c.dataset, root / "imagenet", c.train_split, c.val_split).val
    f = {p: torch.from_numpy(np.asarray(extract_features(model, val, proto.transform(), batch_size=c.batch_size,
                                                         progress=False, precision=p).cls[:, -1]))
         for p in ("fp32", half)}
    cos = torch.nn.functional.cosine_similarity(f["fp32"], f[half], dim=1)
    return float(cos.mean()), float(cos.min()), len(val)


def evaluate_model(model, root: Path, log=print, half: str = "bf16") -> dict:
    out: dict = {"model": model.name, "arch": model.backbone.arch, "device": str(model.device), "half": half}
    for p in ("fp32", half):
        knn, t_knn = _knn(model, root, p)
        miou, t_dense = _dense(model, root, p)
        out[p] = {"knn_top1": knn, "knn_s": t_knn, "dense_miou": miou, "dense_s": t_dense}
        log(f"  {model.name:32s} {p}: k-NN top-1 " + " ".join(f"k={k}:{v:.2f}" for k, v in sorted(knn.items()))
            + f"  ({t_knn:.1f} s)   dense-NN mIoU {miou:.2f}  ({t_dense:.1f} s)")
    d_knn = {k: out[half]["knn_top1"][k] - out["fp32"]["knn_top1"][k] for k in out["fp32"]["knn_top1"]}
    out["delta_knn_top1"] = d_knn
    out["delta_knn_top1_max_abs"] = max(abs(v) for v in d_knn.values())
    out["delta_dense_miou"] = out[half]["dense_miou"] - out["fp32"]["dense_miou"]
    out["cls_cosine_mean"], out["cls_cosine_min"], out["knn_val_images"] = _cls_cosine(model, root, half)
    out["knn_point_per_image"] = 100.0 / out["knn_val_images"]
    out["slowdown_bf16"] = ((out[half]["knn_s"] + out[half]["dense_s"])
                            / max(out["fp32"]["knn_s"] + out["fp32"]["dense_s"], 1e-9))
    out["within_tolerance"] = (out["delta_knn_top1_max_abs"] <= TOLERANCE
                               and abs(out["delta_dense_miou"]) <= TOLERANCE)
    return out


def format_result(r: dict) -> str:
    verdict = "within" if r["within_tolerance"] else "OUTSIDE"
    return (f"  {r['model']} on {r.get('device', 'cpu')}: {r.get('half', 'bf16')} - fp32: k-NN top-1 max |delta| "
            f"{r['delta_knn_top1_max_abs']:.2f} pt "
            f"(k=20: {r['delta_knn_top1'].get(20, float('nan')):+.2f}), dense-NN mIoU {r['delta_dense_miou']:+.2f} pt "
            f"-> {verdict} {TOLERANCE} pt (one k-NN val image = {r['knn_point_per_image']:.2f} pt); "
            f"CLS cosine mean {r['cls_cosine_mean']:.5f} min {r['cls_cosine_min']:.5f}; "
            f"{r.get('half', 'bf16')} protocol time x{r['slowdown_bf16']:.1f} of fp32")


def run(checkpoint: str | None = None, random_init: bool = True, use_checkpoint: bool = True,
        keep_cache: bool = False, preset: str = "small", log=print, device: str = "cpu",
        half: str = "bf16") -> dict:
    from harness.data.synthetic import default_root, generate
    from harness.models.handle import ModelHandle

    root = generate(default_root(preset, 0), preset=preset, seed=0, progress=False)
    models = []
    ckpt = Path(checkpoint) if checkpoint else (find_checkpoint() if use_checkpoint else None)
    if ckpt is not None:
        models.append(ModelHandle.from_checkpoint(ckpt, name=f"{ckpt.parent.name}"))
    if random_init or not models:
        models.append(ModelHandle.random_init("vit_cpu_tiny", seed=0))
    models = [m.to(device) for m in models]
    log(f"bf16 fidelity on SynthScenes-{preset} ({root}); checkpoint: {ckpt or 'none found'}; "
        f"load {os.getloadavg()[0]:.1f}")
    old_home = os.environ.get("SSL_BENCH_HOME")
    tmp = None if keep_cache else tempfile.TemporaryDirectory(prefix="ssl-bench-fidelity-")
    try:
        if tmp is not None:
            os.environ["SSL_BENCH_HOME"] = tmp.name  # fresh features (the data root is already resolved)
        results = [evaluate_model(m, root, log, half) for m in models]
    finally:
        if tmp is not None:
            if old_home is None:
                os.environ.pop("SSL_BENCH_HOME", None)
            else:
                os.environ["SSL_BENCH_HOME"] = old_home
            tmp.cleanup()
    for r in results:
        log(format_result(r))
    return {"preset": preset, "checkpoint": str(ckpt) if ckpt else None, "tolerance": TOLERANCE, "half": half,
            "results": results, "load": os.getloadavg()[0]}


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--checkpoint", default=None, help="harness checkpoint (default: newest in the cache)")
    ap.add_argument("--no-checkpoint", action="store_true", help="random init only")
    ap.add_argument("--no-random-init", action="store_true", help="skip the random-init model when a checkpoint exists")
    ap.add_argument("--keep-cache", action="store_true", help="use the shared feature cache")
    ap.add_argument("--preset", default="small")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--device", default="cpu", help="where the models run (harness.runtime.device)")
    ap.add_argument("--half", choices=["bf16", "fp16"], default="bf16", help="the precision compared with fp32")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    from harness.runtime.device import prepare, resolve_device

    device = str(prepare(resolve_device(args.device)))
    return run(args.checkpoint, random_init=not args.no_random_init, use_checkpoint=not args.no_checkpoint,
               keep_cache=args.keep_cache, preset=args.preset, device=device, half=args.half)


if __name__ == "__main__":
    main()
