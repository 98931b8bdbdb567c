"""Every performance benchmark in one command; prints Markdown tables (docs/BENCHMARKS.md).

    python -m experiments.run_all            # ~10 min on 2 free cores (longer on a loaded box)
    python -m experiments.run_all --quick    # ~2-3 min: ViT-S/16 224 only, small protocol benches
    python -m experiments.run_all --markdown /tmp/bench.md --json /tmp/bench.json

Sections:
1. Machine: CPU model, cores, torch version / CPU capability, load average (start and end).
2. Roofline: fp32 and bf16 square-GEMM peaks (roofline.py) and the matmuls of a real ViT-S/16
   forward, per thread, against them (why a forward cannot reach the square peak).
3. Extraction (extraction_bench.py): timm forward vs the harness extraction path ("plain"
   and "threads" engines), fp32 vs bf16, 224 vs 448, ViT-S vs ViT-B: images/s, GFLOP/s,
   roofline fractions against peaks measured around each case in this process, peak RSS,
   stage split.
4. bf16 fidelity (bf16_fidelity.py): k-NN top-1 and dense-NN mIoU, fp32 vs bf16 (not with --quick).
5. Protocols: dense_nn_bench.py and knn_bench.py, with small
   sizes, each in its own process (their peak-RSS figures are per process).
6. Pretraining: each method's full training step against a plain-ViT anchor (pretrain_step_bench.py).

On a machine shared with other jobs, compare ratios within one run (each table gives the
load average it ran under), not absolute numbers across runs.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]


def machine() -> dict:
    model = platform.processor() or "unknown"
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, timeout=10).stdout
        for line in out.splitlines():
            if line.startswith("Model name:"):
                model = line.split(":", 1)[1].strip()
    except (OSError, subprocess.SubprocessError):
        pass
    import timm

    return {"cpu": model, "cores": os.cpu_count(), "torch": torch.__version__, "timm": timm.__version__,
            "cpu_capability": torch.backends.cpu.get_cpu_capability(), "threads": torch.get_num_threads(),
            "python": platform.python_version(), "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY", "(default)"),
            "load_start": [round(x, 2) for x in os.getloadavg()]}


def _sub(args: list[str], timeout: int) -> tuple[str, float]:
    t = time.perf_counter()
    try:
        p = subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=timeout, cwd=ROOT)
        out = p.stdout + (f"\n[exit {p.returncode}] {p.stderr[-2000:]}" if p.returncode else "")
    except subprocess.TimeoutExpired:
        out = f"[timed out after {timeout} s]"
    return out.strip(), time.perf_counter() - t


def protocol_benches(quick: bool, threads: int, lines: list[str]) -> dict:
    """dense_nn_bench.py and knn_bench.py, small sizes, each in its own process."""
    res: dict = {}
    synth = "tiny" if quick else "small"
    jpath = Path(os.environ.get("TMPDIR", "/tmp")) / f"dense_nn_bench_{os.getpid()}.json"
    text, secs = _sub(["-m", "experiments.dense_nn_bench", "--synth", synth, "--threads", str(threads),
                       "--json", str(jpath)], 900)
    lines.append(f"dense_nn_bench.py --synth {synth} ({secs:.0f} s):\n\n```\n{text}\n```")
    if jpath.is_file():
        res["dense_nn"] = json.loads(jpath.read_text())
        jpath.unlink()
    sizes = ["--train", "20000", "--test", "2000"] if quick else ["--train", "100000", "--test", "10000"]
    text, secs = _sub(["-m", "experiments.knn_bench", *sizes, "--threads", str(threads)], 900)
    lines.append(f"\nknn_bench.py {' '.join(sizes)} ({secs:.0f} s):\n\n```\n{text}\n```")
    res["knn"] = text
    return res


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true",
                    help="~2-3 minutes: ViT-S/16 224, small protocol sizes, no bf16 fidelity")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=1, help="extraction rounds per case (median reported)")
    ap.add_argument("--skip", default="", help="comma list of sections to skip: roofline,extraction,"
                                                "fidelity,protocols,pretrain")
    ap.add_argument("--markdown", default=None, help="also write the report to this Markdown file")
    ap.add_argument("--json", default=None, help="also write every number to this JSON file")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    skip = set(filter(None, args.skip.split(",")))
    q = args.quick
    md: list[str] = []
    report: dict = {"quick": q, "command": "python -m experiments.run_all " + " ".join(argv or sys.argv[1:])}

    def out(line: str = "") -> None:
        print(line, flush=True)
        md.append(line)

    t0 = time.perf_counter()
    m = report["machine"] = machine()
    # The protocol benches run first, in their own processes, while this one is small: a
    # child's peak RSS (ru_maxrss) starts from its parent's RSS at fork time.
    proto_lines: list[str] = []
    if "protocols" not in skip:
        report["protocols"] = protocol_benches(q, args.threads, proto_lines)
    out("## Machine\n")
    out(f"- CPU: {m['cpu']}, {m['cores']} cores; torch {m['torch']} (CPU capability {m['cpu_capability']}), "
        f"timm {m['timm']}, Python {m['python']}; {args.threads} threads; OMP_WAIT_POLICY {m['omp_wait_policy']}")
    out(f"- load average at start: {m['load_start']}")
    out(f"- command: `{report['command'].strip()}`")

    if "roofline" not in skip:
        from harness.models.flops import VitShape
        from experiments.roofline import gemm_shape_peaks, matmul_peak

        out("\n## Roofline\n")
        peaks = {dt: matmul_peak(dt, threads=args.threads, secs=0.5, repeats=2 if q else 3) for dt in ("fp32", "bf16")}
        out("| dtype | GEMM | omp GFLOP/s | streams GFLOP/s | peak | per CPU-s | load |\n|---|---|---|---|---|---|---|")
        for dt, p in peaks.items():
            out(f"| {dt} | {p['size']}^3 | {p['omp'].gflops:.1f} | {p['streams'].gflops:.1f} | {p['peak'].gflops:.1f} "
                f"| {p['peak'].cpu_gflops:.1f} | {p['load']:.1f} |")
        per_thread = 16
        shapes = gemm_shape_peaks(VitShape.of_arch("vit_small_patch16_224"), 224, 224, per_thread,
                                  threads=args.threads, secs=0.3, repeats=2)
        out(f"\nMatmuls of a ViT-S/16 224 forward, {per_thread} images per thread, {args.threads} threads "
            f"(\"streams\"), load {os.getloadavg()[0]:.1f}:\n")
        out("| matmul | shape | share of FLOPs | GFLOP/s | per CPU-s |\n|---|---|---|---|---|")
        for r in shapes["rows"]:
            out(f"| {r['gemm']} | {r['shape']} | {100 * r['share']:.1f}% | {r['gflops']:.1f} | {r['cpu_gflops']:.1f} |")
        sq = peaks["fp32"]["peak"]
        out(f"| **all (FLOP-weighted)** | | 100% | {shapes['weighted_gflops']:.1f} "
            f"({100 * shapes['weighted_gflops'] / sq.gflops:.0f}% of square) "
            f"| {shapes['weighted_cpu_gflops']:.1f} "
            f"({100 * shapes['weighted_cpu_gflops'] / sq.cpu_gflops:.0f}% of square) |")
        report["roofline"] = {"peaks": {k: {"size": v["size"], "omp": v["omp"].as_dict(),
                                            "streams": v["streams"].as_dict(),
                                            "peak": v["peak"].as_dict(), "load": v["load"]} for k, v in peaks.items()},
                              "vit_s_224_shapes": shapes}

    if "extraction" not in skip:
        from experiments import extraction_bench as eb

        out("\n## Extraction\n")
        out("Roofline columns: achieved GFLOP/s over the fp32 (bf16) square-GEMM peak measured just before and "
            "after the case; *per CPU-s*: the same ratio per CPU-second the process got. *outside fwd*: share of "
            "busy time in decode + transform + cache write; *fwd waited*: seconds the forward sat idle waiting "
            "for decoded images.\n")
        out(eb.HEADER)
        kw = dict(threads=args.threads, repeats=args.repeats,
                  log=lambda line: out(line) if line.startswith("|") else print(line))
        if q:
            ext = eb.run(("S",), (224,), ("fp32",), eb.MODES, budget_gflop=60.0, **kw)
            ext16 = eb.run(("S",), (224,), ("bf16",), ("timm", "threads"), bf16_max_gflop=20.0, **kw)
        else:
            ext = eb.run(("S", "B"), (224, 448), ("fp32",), eb.MODES, budget_gflop=150.0, **kw)
            ext16 = eb.run(("S", "B"), (224,), ("bf16",), ("timm", "threads"), bf16_max_gflop=75.0, **kw)
        report["extraction"] = {"fp32": ext, "bf16": ext16}
        out(f"\nload average after extraction: {[round(x, 2) for x in os.getloadavg()]}")

    if "fidelity" not in skip:
        out("\n## bf16 fidelity\n")
        if q:
            out("skipped with --quick (4 protocol runs, ~3 min): run without --quick or "
                "`python -m experiments.bf16_fidelity`")
        else:
            from experiments import bf16_fidelity

            report["fidelity"] = bf16_fidelity.run(log=out)

    if "protocols" not in skip:
        out("\n## Protocols\n")
        for line in proto_lines:
            out(line)

    if "pretrain" not in skip:
        from experiments import pretrain_step_bench as pb

        out(f"\n## Pretraining\n\nEach method's full training step against a plain-ViT anchor "
            f"(pretrain_step_bench.py; configs/methods/<name>_cpu.yaml, SynthScenes-small), "
            f"load {os.getloadavg()[0]:.1f}:\n")
        out(pb.HEADER)
        report["pretrain"] = pb.run(steps=2 if q else 8, warmup=1 if q else 3,
                                    overrides={"batch_size": 16} if q else None, log=out)

    report["load_end"] = [round(x, 2) for x in os.getloadavg()]
    report["seconds"] = time.perf_counter() - t0
    out(f"\nload average at end: {report['load_end']}; total {report['seconds']:.0f} s")
    if args.markdown:
        Path(args.markdown).write_text("\n".join(md) + "\n")
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2, default=str))
    return report


if __name__ == "__main__":
    main()
