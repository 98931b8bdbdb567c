"""Every method's CPU preset against the same backbone at random init, same budget.

    python -m experiments.methods_vs_random [--methods dino ibot cribo synclr] [--out CSV]

For each method: build the engine from ``configs/methods/<name>_cpu.yaml`` (full schedule;
``--set`` overrides apply to all), evaluate its step-0 teacher backbone (the random init
of this very run), pretrain on SynthScenes small, evaluate the exported backbone (the EMA
teacher) and, with ``--student``, the student backbone that the gradients trained.
Metrics are those of ``learning_curve.py``: k-NN CLS / avgpool and the cached-feature
linear probe on the object-centric split, dense-NN 1/1 on the scene split. Prints one
row per (method, init) with the pretraining wall time and writes them as CSV.
"""
from __future__ import annotations

import argparse
import shutil
import time
from pathlib import Path

import pandas as pd
import torch

from experiments.learning_curve import evaluate_point, step0_model
from harness.config import apply_overrides, load_config
from harness.data.synthetic import default_root, generate
from harness.training.engine import Trainer, load_pretrain_config
from harness.models.handle import ModelHandle


def run_method(name: str, root: Path, work: Path, sets: list[str], student: bool = False) -> list[dict]:
    raw = apply_overrides(load_config(f"methods/{name}_cpu.yaml"), sets)
    source = raw.pop("_source_")
    raw["data"] = {"root": str(root), "name": "synthscenes-small"}
    cfg = load_pretrain_config(raw, source)
    shutil.rmtree(work / name, ignore_errors=True)  # a fresh run, never a resumed one
    rows = [{"method": name, "init": "random (step 0)", "steps": 0, "pretrain_min": 0.0,
             **evaluate_point(step0_model(cfg, work / name, source, f"{name}-step0"), root)}]
    t0 = time.perf_counter()
    trainer = Trainer(cfg, work / name, source, progress=False)
    ckpt = trainer.train()
    minutes = (time.perf_counter() - t0) / 60
    rows.append({"method": name, "init": "pretrained", "steps": trainer.stop_step,
                 "pretrain_min": round(minutes, 2),
                 **evaluate_point(ModelHandle.from_checkpoint(ckpt, name=name), root)})
    if student:
        # What the gradients trained, beside the EMA teacher the checkpoint exports.
        rows.append({"method": name, "init": "pretrained (student)", "steps": trainer.stop_step,
                     "pretrain_min": round(minutes, 2),
                     **evaluate_point(ModelHandle(f"{name}-student", trainer.method.student.backbone.eval(),
                                                  {"method": name}), root)})
    return rows


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--methods", nargs="+", default=["dino", "ibot", "cribo", "synclr"])
    ap.add_argument("--work", default="/tmp/ssl-bench-methods-vs-random")
    ap.add_argument("--out", default=None, help="CSV path")
    ap.add_argument("--set", action="append", default=[], help="override for every preset, e.g. train.num_workers=1")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--student", action="store_true",
                    help="also evaluate the student backbone (the checkpoint exports the EMA teacher)")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    root = generate(default_root("small", 0), preset="small", seed=0, progress=False)
    rows: list[dict] = []
    for name in args.methods:
        new = run_method(name, root, Path(args.work), args.set, args.student)
        rows += new
        print(pd.DataFrame(new).round(2).to_string(index=False), flush=True)
        if args.out:
            pd.DataFrame(rows).to_csv(args.out, index=False)
    print("\n" + pd.DataFrame(rows).round(2).to_string(index=False))


if __name__ == "__main__":
    main()
