"""Time and peak memory of the retrieval search as the database grows (revisited Oxford's 70
queries against 5k ... 1M random 384-d features: ROxford + the 1M distractors, simulated).
Numbers: benchmarks/retrieval/README.md ("Cost").

    python -m benchmarks.retrieval.bench_retrieval                     # 5k, 50k, 500k, 1M; fp32 and fp16 banks
    python -m benchmarks.retrieval.bench_retrieval --sizes 5000 50000 --device cuda
    python -m benchmarks.retrieval.bench_retrieval --agreement 200000  # fp16 vs fp32 bank: ranks and AP

Each (size, bank dtype) runs in a fresh process, so its peak resident memory is its own. The
search is benchmarks.retrieval.search: the bank as one (N, 384) tensor, queries streamed in
chunks of 16 (scores: 16 x N float32), the rank of each labelled image (here 100 per query,
ROxford has up to ~400) counted against the row, and the top 100. Features are random; only the
times, the memory and the agreement of the two precisions mean anything.
"""
from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # as the entry point: no spinning OpenMP threads

import argparse  # noqa: E402
import json  # noqa: E402
import resource  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402

from benchmarks.retrieval.revisitop import query_ap  # noqa: E402
from benchmarks.retrieval.search import Bank, labelled_ranks, top_k  # noqa: E402

DIM, QUERIES, LABELLED = 384, 70, 100


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def random_bank(n: int, dtype: torch.dtype, device: str, seed: int = 0, chunk: int = 100_000) -> torch.Tensor:
    """(n, DIM) L2-normalised Gaussian rows, written chunk by chunk into the bank's dtype."""
    g = torch.Generator().manual_seed(seed)
    bank = torch.empty(n, DIM, dtype=dtype, device=device)
    for s in range(0, n, chunk):
        x = torch.randn(min(chunk, n - s), DIM, generator=g)
        bank[s:s + len(x)] = torch.nn.functional.normalize(x, dim=1).to(device=device, dtype=dtype)
    return bank


def queries_and_labels(bank: torch.Tensor, seed: int = 1):
    """Queries near some bank rows (so that positives rank high), their labelled indices."""
    rng = np.random.default_rng(seed)
    n = bank.shape[0]
    labelled = [rng.choice(n, LABELLED, replace=False) for _ in range(QUERIES)]
    g = torch.Generator().manual_seed(seed)
    q = torch.stack([bank[torch.as_tensor(ix[:5], device=bank.device)].float().mean(0).cpu() for ix in labelled])
    q = torch.nn.functional.normalize(q + 0.05 * torch.randn(q.shape, generator=g), dim=1)
    return q.numpy(), labelled


def sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def one(n: int, dtype: str, device: str) -> dict:
    rss0 = peak_rss_mb()
    t0 = time.perf_counter()
    bank = Bank(random_bank(n, {"float32": torch.float32, "float16": torch.float16}[dtype], device))
    q, labelled = queries_and_labels(bank.features)
    sync(device)
    if device.startswith("cuda"):
        torch.cuda.reset_peak_memory_stats()
    t1 = time.perf_counter()
    labelled_ranks(bank, q, labelled, chunk=16)
    sync(device)
    t2 = time.perf_counter()
    top_k(bank, q, 100, chunk=16)
    sync(device)
    t3 = time.perf_counter()
    out = {"n": n, "dtype": dtype, "device": device,
           "bank_mb": bank.features.numel() * bank.features.element_size() / 2**20,
           "build_s": t1 - t0, "ranks_s": t2 - t1, "topk_s": t3 - t2, "peak_rss_mb": peak_rss_mb(),
           "rss_before_mb": rss0}
    if device.startswith("cuda"):
        out["peak_gpu_mb"] = torch.cuda.max_memory_allocated() / 2**20
    return out


def agreement(n: int, device: str) -> dict:
    """Ranks and AP of the same queries with a float32 and a float16 bank."""
    b32 = Bank(random_bank(n, torch.float32, device))
    b16 = Bank(b32.features.half())
    q, labelled = queries_and_labels(b32.features)
    r32, r16 = labelled_ranks(b32, q, labelled), labelled_ranks(b16, q, labelled)
    moved = sum(r32[i][j] != r16[i][j] for i in range(QUERIES) for j in labelled[i])
    ap32 = np.array([query_ap(r, ix[:5], ix[5:10]) for r, ix in zip(r32, labelled)])
    ap16 = np.array([query_ap(r, ix[:5], ix[5:10]) for r, ix in zip(r16, labelled)])
    return {"n": n, "labelled": QUERIES * LABELLED, "ranks_moved": int(moved),
            "max_abs_ap_diff": float(np.abs(ap32 - ap16).max()), "map32": float(ap32.mean() * 100),
            "map16": float(ap16.mean() * 100)}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[5_000, 50_000, 500_000, 1_000_000])
    ap.add_argument("--dtypes", nargs="+", default=["float32", "float16"])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--agreement", type=int, default=None, help="compare fp16 and fp32 banks at this size")
    ap.add_argument("--one", nargs=2, metavar=("N", "DTYPE"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    if args.one:
        print(json.dumps(one(int(args.one[0]), args.one[1], args.device)))
        return
    if args.agreement:
        print(json.dumps(agreement(args.agreement, args.device)))
        return
    print(f"{'N':>9} {'bank':>8} {'bank MB':>8} {'build s':>8} {'ranks s':>8} {'top100 s':>9} {'peak RSS MB':>12}"
          + (" peak GPU MB" if args.device.startswith("cuda") else ""))
    for n in args.sizes:
        for dtype in args.dtypes:
            cmd = [sys.executable, "-m", "benchmarks.retrieval.bench_retrieval", "--one", str(n), dtype,
                   "--device", args.device, "--threads", str(args.threads)]
            r = json.loads(subprocess.run(cmd, capture_output=True, text=True,
                                          check=True).stdout.strip().splitlines()[-1])
            gpu = f" {r['peak_gpu_mb']:11.0f}" if "peak_gpu_mb" in r else ""
            print(f"{n:>9} {dtype:>8} {r['bank_mb']:8.0f} {r['build_s']:8.2f} {r['ranks_s']:8.2f} {r['topk_s']:9.2f} "
                  f"{r['peak_rss_mb']:12.0f}{gpu}", flush=True)


if __name__ == "__main__":
    main()
