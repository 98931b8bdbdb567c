"""Matmul peaks of this machine, measured in-process (the roofline the forward is held to).

    python -m experiments.roofline [--threads 2] [--secs 0.5]

Two ways to use T cores, both measured, the better one is the peak:
- "omp":     one GEMM at a time on torch's intra-op team of T threads (MKL / oneDNN);
- "streams": T Python threads each running its own single-threaded GEMM (torch threads = 1),
             which is how the harness's "threads" extraction engine runs the forward.
Each figure is the best of `repeats` windows of `secs` seconds (the machine may be shared:
the best window is the least disturbed one, which makes the peak, and so every roofline
fraction computed against it, conservative). Also reported: GFLOP per CPU-second (the
throughput per cycle the process actually got, robust to other jobs taking cores).

`gemm_shape_peaks` measures the matmuls of a real ViT forward (e.g. (32*197) x 384 x 1152)
to separate "the forward is slower than the big-square peak because of its shapes" from
"the forward loses time outside matmuls".
"""
from __future__ import annotations

import argparse
import os
import threading
import time
from dataclasses import dataclass

import torch

from harness.models.flops import VitShape, gemm_shapes

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


@dataclass
class Rate:
    gflops: float  # wall-clock GFLOP/s
    cpu_gflops: float  # GFLOP per process CPU-second

    def as_dict(self) -> dict:
        return {"gflops": round(self.gflops, 3), "cpu_gflops": round(self.cpu_gflops, 3)}


def _window(run_once, flops_per_round: float, secs: float) -> Rate:
    """Run `run_once` (one round = flops_per_round FLOPs) for `secs` seconds."""
    t, c, n = time.perf_counter(), time.process_time(), 0
    while True:
        run_once()
        n += 1
        dt = time.perf_counter() - t
        if dt >= secs:
            break
    cpu = max(time.process_time() - c, 1e-9)
    return Rate(flops_per_round * n / dt / 1e9, flops_per_round * n / cpu / 1e9)


def _best(rates: list[Rate]) -> Rate:
    return Rate(max(r.gflops for r in rates), max(r.cpu_gflops for r in rates))


def _operands(bc: int, m: int, k: int, n: int, dtype, seed: int):
    """(a, b, fn): a 2-D product is a linear layer, x (m, k) @ W (n, k)^T, the op a ViT runs
    (for bf16 on CPUs without bf16 instructions torch's linear is ~4x faster than its mm);
    a batched one (bc > 1) is torch.matmul, as in attention."""
    g = torch.Generator().manual_seed(seed)
    if bc > 1:
        a, b = torch.randn(bc, m, k, generator=g), torch.randn(bc, k, n, generator=g)
        return a.to(dtype), b.to(dtype), torch.matmul
    a, w = torch.randn(m, k, generator=g), torch.randn(n, k, generator=g)
    return a.to(dtype), w.to(dtype), torch.nn.functional.linear


def measure_matmul(bc: int, m: int, k: int, n: int, *, dtype=torch.float32, threads: int = 2,
                   mode: str = "streams", secs: float = 0.5, repeats: int = 3) -> Rate:
    """Throughput of (bc x) m x k @ k x n in `mode` ("omp" or "streams") on `threads` cores."""
    flops = 2.0 * bc * m * k * n
    old = torch.get_num_threads()
    try:
        if mode == "omp":
            torch.set_num_threads(threads)
            a, b, fn = _operands(bc, m, k, n, dtype, 0)
            fn(a, b)  # warm-up: workspace, thread team
            return _best([_window(lambda: fn(a, b), flops, secs) for _ in range(repeats)])
        torch.set_num_threads(1)
        ops = [_operands(bc, m, k, n, dtype, s) for s in range(threads)]
        for a, b, fn in ops:
            fn(a, b)
        rates = []
        for _ in range(repeats):
            counts = [0] * threads
            start = threading.Barrier(threads + 1)
            deadline = [0.0]

            def work(j: int) -> None:
                a, b, fn = ops[j]
                start.wait()
                while time.perf_counter() < deadline[0]:
                    fn(a, b)
                    counts[j] += 1

            pool = [threading.Thread(target=work, args=(j,)) for j in range(threads)]
            for th in pool:
                th.start()
            t, c = time.perf_counter(), time.process_time()
            deadline[0] = t + secs
            start.wait()
            for th in pool:
                th.join()
            dt, cpu = time.perf_counter() - t, max(time.process_time() - c, 1e-9)
            rates.append(Rate(flops * sum(counts) / dt / 1e9, flops * sum(counts) / cpu / 1e9))
        return _best(rates)
    finally:
        torch.set_num_threads(old)


def matmul_peak(dtype: str = "fp32", *, threads: int = 2, size: int | None = None, secs: float = 0.5,
                repeats: int = 3) -> dict:
    """Square-GEMM peak: {"omp": Rate, "streams": Rate, "peak": Rate (the better), "size"}."""
    size = size or (2048 if dtype == "fp32" else 1024)  # bf16 is emulated on CPUs without
    # AVX512-BF16 / AMX (~5 GFLOP/s per core on AVX2): keep one product well under a second
    dt = DTYPES[dtype]
    omp = measure_matmul(1, size, size, size, dtype=dt, threads=threads, mode="omp", secs=secs, repeats=repeats)
    streams = measure_matmul(1, size, size, size, dtype=dt, threads=threads, mode="streams", secs=secs,
                             repeats=repeats)
    return {"dtype": dtype, "size": size, "omp": omp, "streams": streams, "peak": _best([omp, streams]),
            "load": os.getloadavg()[0]}


def gemm_shape_peaks(shape: VitShape, height: int, width: int, batch: int, *, threads: int = 2,
                     secs: float = 0.3, repeats: int = 2, dtype=torch.float32) -> dict:
    """Throughput of every matmul of a forward of `batch` images per thread ("streams" mode),
    and the shape-weighted matmul roofline: total FLOPs / sum(FLOPs_i / rate_i), i.e. the
    forward's speed if it did nothing but its matmuls, each at its measured speed."""
    rows, t_total, c_total, f_total = [], 0.0, 0.0, 0.0
    for name, bc, m, k, n, calls in gemm_shapes(shape, height, width, batch):
        r = measure_matmul(bc, m, k, n, dtype=dtype, threads=threads, mode="streams", secs=secs, repeats=repeats)
        f = 2.0 * bc * m * k * n * calls
        rows.append({"gemm": name, "shape": f"{bc}x({m}x{k}x{n})" if bc > 1 else f"{m}x{k}x{n}",
                     "flops": f, "gflops": round(r.gflops, 2), "cpu_gflops": round(r.cpu_gflops, 2)})
        f_total += f
        t_total += f / (r.gflops * 1e9)
        c_total += f / (r.cpu_gflops * 1e9)
    for row in rows:
        row["share"] = round(row.pop("flops") / f_total, 4)
    return {"rows": rows, "weighted_gflops": f_total / t_total / 1e9,
            "weighted_cpu_gflops": f_total / c_total / 1e9}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--secs", type=float, default=0.5)
    ap.add_argument("--shapes", default="vit_small_patch16_224:224:32",
                    help="arch:size:batch per thread for the shape table ('' to skip)")
    args = ap.parse_args(argv)
    print(f"load average {os.getloadavg()}, torch {torch.__version__}, {args.threads} threads, "
          f"cpu capability {torch.backends.cpu.get_cpu_capability()}")
    for dt in ("fp32", "bf16"):
        p = matmul_peak(dt, threads=args.threads, secs=args.secs)
        print(f"{dt} {p['size']}^3: omp {p['omp'].gflops:7.1f} GFLOP/s  streams {p['streams'].gflops:7.1f} GFLOP/s  "
              f"(per CPU-s: {p['omp'].cpu_gflops:.1f} / {p['streams'].cpu_gflops:.1f})")
    if args.shapes:
        arch, size, batch = args.shapes.split(":")
        res = gemm_shape_peaks(VitShape.of_arch(arch), int(size), int(size), int(batch), threads=args.threads)
        for r in res["rows"]:
            print(f"  {r['gemm']:12s} {r['shape']:>24s}  {100 * r['share']:5.1f}% of FLOPs  {r['gflops']:7.1f} GFLOP/s"
                  f"  ({r['cpu_gflops']:.1f} per CPU-s)")
        print(f"  shape-weighted matmul roofline: {res['weighted_gflops']:.1f} GFLOP/s "
              f"({res['weighted_cpu_gflops']:.1f} per CPU-s)")
    print(f"load average {os.getloadavg()}")


if __name__ == "__main__":
    main()
