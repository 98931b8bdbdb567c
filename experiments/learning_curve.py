"""Learning curve of a method on SynthScenes: k-NN (CLS and mean-pooled patch tokens),
a cached-feature linear probe and dense-NN mIoU versus minutes of CPU pretraining,
against the same backbone at random init (step 0 of the same seed).

    python -m experiments.learning_curve --method methods/dino_cpu.yaml --steps 0 100 200 300 408

Pretraining continues the same run between points (the engine resumes from its last
checkpoint when only max_steps grows), so the curve is one trajectory. Prints a table
and writes it as CSV (--out).
"""
from __future__ import annotations

import argparse
import shutil
import time
from pathlib import Path

import pandas as pd
import torch

from harness.config import apply_overrides, load_config
from harness.data.synthetic import default_root, generate
from harness.training.engine import Trainer, load_pretrain_config
from harness.protocol_info import build_protocol
from harness.models.handle import ModelHandle


def evaluate_point(model: ModelHandle, root: Path, linear: bool = True,
                   knn_features: tuple[str, ...] = ("cls", "avgpool")) -> dict:
    """k-NN (``knn_features``: CLS, avgpool), cached-feature linear probe and dense-NN 1/1 of one
    model."""
    row = {}
    for feature in knn_features:
        res = build_protocol("knn", "synth", {"dataset": "imagefolder", "feature": feature, "ks": [20],
                                             "cache": False, "progress": False}).run(model, root / "imagenet")
        row[f"knn_{feature}_top1"] = res[0].metrics["top1"]
    if linear:
        res = build_protocol("linear", "synth", {"dataset": "imagefolder", "cached_features": True,
                                                "progress": False}).run(model, root / "imagenet")
        row["linear_top1"] = res[0].metrics["top1"]
    res = build_protocol("dense_nn", "cribo", {"dataset": "voc", "fractions": ["1/1"], "seeds": [42],
                                               "progress": False}).run(model, root)
    row["dense_nn_miou"] = res[0].metrics["mIoU"]
    return row


def step0_model(cfg, work: Path, source: str, name: str = "step0") -> ModelHandle:
    """The teacher backbone a run starts from (the engine seeds its initialisation): the
    random init that run's pretrained checkpoint is compared with."""
    trainer = Trainer(cfg, work, source, progress=False)
    return ModelHandle(name, trainer.method.teacher.backbone.eval(), {"method": "random_init"})


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--method", default="methods/dino_cpu.yaml")
    ap.add_argument("--steps", type=int, nargs="+", default=[0, 100, 200, 300, 408])
    ap.add_argument("--preset", default="small")
    ap.add_argument("--work", default="/tmp/ssl-bench-learning-curve")
    ap.add_argument("--out", default=None, help="CSV path")
    ap.add_argument("--set", action="append", default=[])
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)

    root = generate(default_root(args.preset, 0), preset=args.preset, seed=0, progress=False)
    raw = apply_overrides(load_config(args.method), args.set)
    source = raw.pop("_source_", args.method)
    raw["data"] = {"root": str(root), "name": f"synthscenes-{args.preset}"}
    work = Path(args.work)
    shutil.rmtree(work, ignore_errors=True)
    rows, train_s = [], 0.0
    for steps in sorted(args.steps):
        if steps == 0:
            model = step0_model(load_pretrain_config(raw, source), work, source)
        else:
            raw["train"]["max_steps"] = steps
            cfg = load_pretrain_config(raw, source)
            t0 = time.perf_counter()
            ckpt = Trainer(cfg, work, source, progress=False).train()
            train_s += time.perf_counter() - t0
            model = ModelHandle.from_checkpoint(ckpt, name=f"step{steps}")
        row = {"steps": steps, "pretrain_min": round(train_s / 60, 2), **evaluate_point(model, root)}
        rows.append(row)
        print(pd.DataFrame([row]).to_string(index=False, header=len(rows) == 1), flush=True)
    df = pd.DataFrame(rows)
    print("\n" + df.to_string(index=False))
    if args.out:
        df.to_csv(args.out, index=False)


if __name__ == "__main__":
    main()
