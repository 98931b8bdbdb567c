"""One pretraining step per registered method: training_step + backward on one batch.

    python -m experiments.pretrain_step_bench [--batch 64] [--steps 3] [--methods dino,ibot]

Each method is built from configs/methods/<name>_cpu.yaml (harness.engine.load_pretrain_config
+ build_method) on SynthScenes-small; one batch is collated from its own dataset and
augmentations; a warm-up step, then `--steps` timed steps of training_step + backward (no
optimizer step: the weights, so the work, stay the same). Prints seconds per step,
images/s, the share of the step spent in the backward, and the process RSS (peak while the
steps ran, and its growth over them). A method without a
_cpu config is listed as skipped.
"""
from __future__ import annotations

import argparse
import importlib
import os
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]


def bench_method(name: str, data_root: Path, batch: int | None, steps: int) -> dict:
    from harness.conformance import step_info
    from harness.config import load_config
    from harness.engine import build_method, global_batches, load_pretrain_config

    cfg_path = ROOT / "configs" / "methods" / f"{name}_cpu.yaml"
    if not cfg_path.is_file():
        return {"method": name, "skipped": f"no {cfg_path.relative_to(ROOT)}"}
    raw = load_config(cfg_path)
    source = raw.pop("_source_", str(cfg_path))
    raw["data"] = {"root": str(data_root)}
    if batch:
        raw.setdefault("train", {})["batch_size"] = batch
    cfg = load_pretrain_config(raw, source)
    torch.manual_seed(0)
    method = build_method(cfg, source)
    method.train()
    dataset = method.build_dataset(data_root, seed=0)
    if hasattr(dataset, "set_epoch"):
        dataset.set_epoch(0)
    bs = cfg.train.batch_size
    t = time.perf_counter()
    idx = global_batches(method, dataset, 0, bs, 0)[0]
    data = method.collate([dataset[i] for i in idx])
    t_data = time.perf_counter() - t
    from experiments.extraction_bench import RssSampler

    fwd, bwd = [], []
    with RssSampler() as rss:
        for s in range(steps + 1):  # step 0: warm-up
            torch.manual_seed(s)
            method.zero_grad(set_to_none=True)
            t = time.perf_counter()
            loss = method.training_step(data, step_info(s))["loss"]
            t1 = time.perf_counter()
            loss.backward()
            t2 = time.perf_counter()
            if s:
                fwd.append(t1 - t)
                bwd.append(t2 - t1)
    step = sum(fwd) / len(fwd) + sum(bwd) / len(bwd)
    return {"method": name, "arch": cfg.backbone.arch, "batch": bs, "step_s": step, "img_s": bs / step,
            "backward_share": (sum(bwd) / len(bwd)) / step, "data_s": t_data,
            "params_m": sum(p.numel() for _, p in method.trainable_parameters()) / 1e6,
            "loss": float(loss.detach()), "rss_mb": rss.peak_mb, "rss_growth_mb": rss.peak_mb - rss.start_mb}


def run(methods: list[str] | None = None, batch: int | None = None, steps: int = 3, preset: str = "small",
        log=print) -> list[dict]:
    importlib.import_module("methods")  # registers the built-in methods
    from harness.data.synthetic import default_root, generate
    from harness.registry import METHODS

    root = generate(default_root(preset, 0), preset=preset, seed=0, progress=False)
    names = methods or sorted(METHODS.names())
    out = []
    for name in names:
        try:
            r = bench_method(name, root, batch, steps)
        except Exception as e:  # one broken method must not hide the others' numbers
            r = {"method": name, "error": f"{type(e).__name__}: {e}"}
        out.append(r)
        log(format_row(r))
    return out


def format_row(r: dict) -> str:
    if "skipped" in r or "error" in r:
        return f"| {r['method']} | - | - | - | - | - | - | {r.get('skipped') or r.get('error')} |"
    return (f"| {r['method']} | {r['arch']} | {r['batch']} | {r['step_s']:.2f} | {r['img_s']:.1f} "
            f"| {100 * r['backward_share']:.0f}% | {r['rss_mb']:.0f} (+{r['rss_growth_mb']:.0f}) | |")


HEADER = ("| method | arch | batch | s / step (fwd+bwd) | img/s | backward share | RSS MB (growth in the steps) "
          "| notes |\n|---|---|---|---|---|---|---|---|")


def main(argv=None) -> list[dict]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--methods", default=None, help="comma list (default: every registered method)")
    ap.add_argument("--batch", type=int, default=None, help="override train.batch_size")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    print(f"load average {os.getloadavg()}, torch {torch.__version__}, {args.threads} threads")
    print(HEADER)
    return run(args.methods.split(",") if args.methods else None, args.batch, args.steps)


if __name__ == "__main__":
    main()
