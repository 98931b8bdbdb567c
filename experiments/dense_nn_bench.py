"""Speed / memory benchmark of the dense NN protocol on a fixed SynthScenes workload.

    python -m experiments.dense_nn_bench [--synth small] [--checkpoint CKPT] [--threads 2]

Prints: extraction images/s and the achieved GFLOP/s against the machine's measured fp32
matmul peak (torch.mm 2048^3), bank build, search and metric times, peak RSS, and the
mIoU deviation of the IVF/PQ index from exact search. Not a test: numbers only.
"""
from __future__ import annotations

import argparse
import json
import resource
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from benchmarks.dense_nn.protocol import DenseNN, grid_features, core_settings, metrics_from_confusion
from benchmarks.dense_nn.core import aggregate, build_bank, predict_image
from benchmarks.dense_nn.metric import ConfusionMatrix, compute_miou
from harness.models.flops import VitShape, token_flops


def matmul_peak_gflops(threads: int, size: int = 2048, reps: int = 5) -> float:
    torch.set_num_threads(threads)
    a = torch.randn(size, size)
    b = torch.randn(size, size)
    torch.mm(a, b)
    best = float("inf")
    for _ in range(reps):
        t = time.perf_counter()
        torch.mm(a, b)
        best = min(best, time.perf_counter() - t)
    return 2 * size ** 3 / best / 1e9


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def evaluate_timed(bank, proto, val_fs, val_masks, s):
    """Like dense_nn_core.evaluate, with search (kNN + aggregation) and metric
    (upsampling, argmax, confusion) timed apart."""
    conf = ConfusionMatrix(s.num_classes, s.num_pred, s.ignore_index)
    t_search = t_metric = 0.0
    n = len(val_masks)
    i = 0
    while i < n:
        items, rows = [], 0
        while i < n and rows < s.search_chunk:
            f = grid_features(val_fs, i)
            items.append((f, tuple(int(v) for v in val_fs.grids[i]), val_masks[i]))
            rows += len(f)
            i += 1
        t = time.perf_counter()
        scores = aggregate(bank, np.concatenate([it[0] for it in items]), s)
        t_search += time.perf_counter() - t
        t = time.perf_counter()
        start = 0
        for f, grid, mask in items:
            conf.update(mask, predict_image(scores[start:start + len(f)], grid, mask.shape, s))
            start += len(f)
        t_metric += time.perf_counter() - t
    t = time.perf_counter()
    metrics_from_confusion(conf.matrix, proto.cfg)
    compute_miou(conf.matrix, hungarian=True)
    t_metric += time.perf_counter() - t
    return conf, t_search, t_metric


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--synth", default="small", help="SynthScenes preset (tiny|small|medium)")
    ap.add_argument("--data-root", default=None, help="existing SynthScenes root (else generated in the cache)")
    ap.add_argument("--checkpoint", default=None, help="harness checkpoint (default: random-init --arch)")
    ap.add_argument("--arch", default="vit_cpu_tiny")
    ap.add_argument("--preset", default="cribo", choices=["cribo", "hbird"])
    ap.add_argument("--dataset", default="voc")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--k", type=int, default=None)
    ap.add_argument("--json", default=None, help="also write the numbers to this JSON file")
    args = ap.parse_args(argv)

    from harness.data.synthetic import default_root, generate
    from harness.models.handle import ModelHandle

    torch.set_num_threads(args.threads)
    root = Path(args.data_root) if args.data_root else generate(default_root(args.synth), args.synth, 0, progress=False)
    model = (ModelHandle.from_checkpoint(args.checkpoint) if args.checkpoint
             else ModelHandle.random_init(args.arch, seed=0))
    values = {"dataset": args.dataset, "fractions": ["1/1"], "seeds": [42], "progress": False,
              "threads": args.threads, "bank_augment": "none", "write_subsets": False}
    if args.k:
        values["k"] = args.k
    proto = DenseNN.from_preset(args.preset, values)
    cfg = proto.cfg
    from harness.registry import DATASETS

    train_split, val_split = proto.splits()
    ds = DATASETS.get(cfg.dataset)
    train_ds, val_ds = ds(root, train_split), ds(root, val_split)
    patch = model.backbone.patch_size
    s = core_settings(cfg, train_ds.num_classes, train_ds.ignore_index, patch)
    transform = proto.transform(patch)

    peak = matmul_peak_gflops(args.threads)
    with tempfile.TemporaryDirectory() as cache:
        import os

        os.environ["SSL_BENCH_HOME"] = cache  # fresh extraction, not a cache hit
        t = time.perf_counter()
        train_fs = proto._extract(model, train_ds, transform, "train")
        val_fs = proto._extract(model, val_ds, transform, "val")
        t_extract = time.perf_counter() - t
        n_img = len(train_ds) + len(val_ds)
        tokens = np.concatenate([train_fs.grids, val_fs.grids]).prod(1)
        shape = VitShape.of(model.backbone)
        flops = sum(token_flops(shape, int(tk)) for tk in tokens)
        t = time.perf_counter()
        labels = proto._train_labels(train_ds, lambda i: proto._resize_mask(transform,
                                                                            np.asarray(train_ds.load_mask(i))),
                                     train_fs.grids, s)
        val_masks = [proto._resize_mask(transform, np.asarray(val_ds.load_mask(i))) for i in range(len(val_ds))]
        t_labels = time.perf_counter() - t

        rows = {}
        variants = {
            "exact": {},  # the preset's bank_dtype (cribo: float16, torch blocked matmul)
            "exact_fp32": {"bank_dtype": "float32"},  # faiss IndexFlatIP on CPU
            "ivfpq": {"index": "ivfpq", "pq_m": min(16, model.backbone.embed_dim // 4), "ivf_nlist": 256,
                      "nprobe": 16, "ivf_train_size": 32768},
        }
        for kind, extra in variants.items():
            sk = core_settings(DenseNN.from_preset(args.preset, dict(values, **extra)).cfg,
                               train_ds.num_classes, train_ds.ignore_index, patch)
            t = time.perf_counter()
            bank = build_bank(lambda i: grid_features(train_fs, i), labels, sk, threads=args.threads)
            t_bank = time.perf_counter() - t
            conf, t_search, t_metric = evaluate_timed(bank, proto, val_fs, val_masks, sk)
            rows[kind] = {"mIoU": metrics_from_confusion(conf.matrix, cfg)["mIoU"], "bank_patches": len(bank),
                          "bank_MiB": bank.index.nbytes() / 2**20, "bank_s": t_bank, "search_s": t_search,
                          "metric_s": t_metric, "queries": int(val_fs.grids.prod(1).sum())}
            del bank

    gflops = flops / t_extract / 1e9
    out = {
        "workload": {"synth": args.synth, "dataset": cfg.dataset, "preset": args.preset, "arch": model.backbone.arch,
                     "train_images": len(train_ds), "val_images": len(val_ds), "k": cfg.k,
                     "threads": args.threads, "torch": torch.__version__},
        "extraction": {"images": n_img, "seconds": t_extract, "images_per_s": n_img / t_extract,
                       "gflop_per_image": flops / n_img / 1e9, "achieved_gflops": gflops,
                       "matmul_peak_gflops": peak, "ratio_to_peak": gflops / peak},
        "labels_s": t_labels,
        **rows,
        "ivfpq_miou_deviation": rows["ivfpq"]["mIoU"] - rows["exact"]["mIoU"],
        "fp32_miou_deviation": rows["exact_fp32"]["mIoU"] - rows["exact"]["mIoU"],
        "peak_rss_mb": peak_rss_mb(),
    }
    e = out["extraction"]
    print(f"dense_nn bench: {args.preset} on SynthScenes-{args.synth} {cfg.dataset} "
          f"({len(train_ds)} train / {len(val_ds)} val), {model.backbone.arch}, {args.threads} threads")
    print(f"  extraction      {e['images_per_s']:8.1f} img/s  {e['achieved_gflops']:6.2f} GFLOP/s achieved "
          f"vs {e['matmul_peak_gflops']:.1f} GFLOP/s matmul peak -> {100 * e['ratio_to_peak']:.1f}% of peak")
    print(f"  patch labels    {t_labels:8.2f} s")
    for kind in variants:
        r = out[kind]
        print(f"  {kind:<10} bank {r['bank_patches']:,} patches ({r['bank_MiB']:.1f} MiB) "
              f"built in {r['bank_s']:.2f} s; "
              f"search {r['search_s']:.2f} s for {r['queries']:,} queries "
              f"({r['queries'] / max(r['search_s'], 1e-9):,.0f} q/s); metric {r['metric_s']:.2f} s; mIoU "
              f"{r['mIoU']:.2f}")
    print(f"  IVF/PQ mIoU deviation from exact: {out['ivfpq_miou_deviation']:+.2f} points "
          f"(float32 faiss vs {cfg.bank_dtype} exact: {out['fp32_miou_deviation']:+.2f})")
    print(f"  peak RSS        {out['peak_rss_mb']:8.0f} MB")
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2))
    return out


if __name__ == "__main__":
    main()
