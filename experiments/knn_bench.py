"""k-NN search + vote time, faiss vs torch backend (numbers: benchmarks/classification/README.md).

    python -m experiments.knn_bench                      # 100k x 384 train, 10k val, 1000 classes
    python -m experiments.knn_bench --train 20000 --test 2000
    python -m experiments.knn_bench --imagenet-scale     # 1.28M x 1536 train (generated chunk by
                                                             # chunk, never stored), 1000 val: peak memory

Features are random (class means + noise); only the time and the memory mean anything.
"""
from __future__ import annotations

import argparse
import os
import resource
import time

import torch

from benchmarks.classification.knn import Rows, weighted_knn


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def features(n: int, dim: int, classes: int, seed: int, means: torch.Tensor):
    g = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, classes, (n,), generator=g)
    return (means[labels] + 3.0 * torch.randn(n, dim, generator=g)).numpy(), labels.numpy()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--train", type=int, default=100_000)
    ap.add_argument("--test", type=int, default=None, help="val rows (default 10,000; 1,000 with --imagenet-scale)")
    ap.add_argument("--dim", type=int, default=384)
    ap.add_argument("--classes", type=int, default=1000)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--backends", default="faiss,torch")
    ap.add_argument("--imagenet-scale", action="store_true",
                    help="1.28M x 1536 train rows generated per chunk (memory check; the time includes "
                         "generating them), 1000 val rows")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    os.environ.setdefault("OMP_NUM_THREADS", str(args.threads))
    try:
        import faiss

        faiss.omp_set_num_threads(args.threads)
    except ImportError:
        pass
    if args.imagenet_scale:
        args.train, args.dim = 1_281_167, 1536
    if args.test is None:
        args.test = 1000 if args.imagenet_scale else 10_000
    means = torch.randn(args.classes, args.dim, generator=torch.Generator().manual_seed(0))
    test, test_labels = features(args.test, args.dim, args.classes, 1, means)
    ks = [10, 20, 100, 200]
    print(f"train {args.train} x {args.dim}, val {args.test}, {args.classes} classes, k {ks}, "
          f"{args.threads} threads, torch {torch.__version__}, load average {os.getloadavg()[0]:.1f}")
    if args.imagenet_scale:
        chunk = 65536
        train_labels = torch.randint(0, args.classes, (args.train,), generator=torch.Generator().manual_seed(2))

        def rows(a: int, b: int) -> torch.Tensor:  # generated on demand: nothing of size N x d is stored
            g = torch.Generator().manual_seed(10_000 + a)
            return means[train_labels[a:b]] + 3.0 * torch.randn(b - a, args.dim, generator=g)

        train = Rows(None, n=args.train, fn=rows)
        train_labels = train_labels.numpy()
        print(f"a stored train set would take {args.train * args.dim * 4 / 2**30:.1f} GiB")
    else:
        chunk = 65536
        train, train_labels = features(args.train, args.dim, args.classes, 2, means)
    for backend in args.backends.split(","):
        rss0 = peak_rss_mb()
        t, c = time.perf_counter(), time.process_time()
        res = weighted_knn(train, train_labels, test, test_labels, ks=ks, num_classes=args.classes,
                           backend=backend, train_chunk=chunk, test_chunk=1024)
        dt, cpu = time.perf_counter() - t, time.process_time() - c
        # CPU seconds are what the work costs when the cores are free (the box is shared).
        print(f"{backend:6s} {dt:8.2f} s wall, {cpu:8.2f} CPU s ({args.test / dt:6.0f} val img/s wall)  "
              f"top-1 k=20 {res[20]['top1']:.2f}  peak RSS {peak_rss_mb():.0f} MB (before: {rss0:.0f} MB)")


if __name__ == "__main__":
    main()
