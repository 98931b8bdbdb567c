"""Backbone forward / feature extraction speed against the measured matmul roofline.

    python -m experiments.extraction_bench                       # ViT-S/B x 224/448, fp32 + bf16
    python -m experiments.extraction_bench --archs S --sizes 224 --precisions fp32 \
        --budget 60

Cases, per (arch, size, precision):
- ``timm``:     plain timm ``VisionTransformer.forward_features`` on random tensors, eval mode,
                inference_mode, torch's default intra-op threads: the reference point;
- ``plain``:    ``harness.features.extract.extract_features(engine="plain")``: JPEG decode + transform
                (DataLoader in the calling thread) + forward on the OpenMP team + cache write;
- ``threads``:  ``extract_features(engine="threads")`` (the harness default): the same work,
                loader threads + single-threaded kernels in one forward thread per core.

The cases of one (arch, size, precision) run back to back, `--repeats` rounds in alternating
order; each row is the median over rounds. Every case prints images/s, achieved GFLOP/s (matmul FLOPs from the
architecture, see
flops.py), the fraction of the fp32 (and bf16) matmul peak measured in the same process just
before and just after the case (their mean; see roofline.py), the same fraction per
CPU-second the process got (robust to other jobs on a shared machine), peak RSS while the
case ran (and its growth during the case), and for the harness cases the stage split: share of busy time outside the
forward
(decode, transform, cache write) and the seconds the forward waited for decoded images.

Images: ImageNet-like JPEGs (500x375, quality 90) written once to a temporary folder;
transform ResizeCenterCrop(size * 8/7, size) (the k-NN / linear-probe preprocessing); the
harness cases write patch tokens (float32) to a fresh feature cache, as dense protocols do.
Weights are random (speed does not depend on them).
"""
from __future__ import annotations

import argparse
import io
import json
import math
import os
import tempfile
import threading
import time
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import torch

from harness.models.flops import VitShape, shape_flops
from experiments.roofline import matmul_peak

ARCHS = {"S": "vit_small_patch16_224", "B": "vit_base_patch16_224"}
MODES = ("timm", "plain", "threads")


# ----------------------------------------------------------------------------- helpers
class RssSampler:
    """Peak resident set size while the block runs (sampled every 10 ms), in MB."""

    def __init__(self, interval: float = 0.01):
        self.interval, self.peak_mb = interval, 0.0
        self._stop = threading.Event()
        self._page = os.sysconf("SC_PAGE_SIZE")

    def _rss(self) -> float:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * self._page / 2**20

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak_mb = max(self.peak_mb, self._rss())
            self._stop.wait(self.interval)

    def __enter__(self) -> "RssSampler":
        self.peak_mb = self.start_mb = self._rss()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self.peak_mb = max(self.peak_mb, self._rss())


def make_jpegs(folder: Path, n: int, size=(500, 375), seed: int = 0) -> list[Path]:
    """n natural-looking JPEGs (smooth colour fields + fine texture), written once."""
    from PIL import Image

    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    paths = []
    for i in range(n):
        p = folder / f"img_{i:05d}.jpg"
        if not p.is_file():
            low = Image.fromarray(rng.integers(0, 255, (12, 16, 3), dtype=np.uint8)).resize(size, Image.BICUBIC)
            arr = np.asarray(low, dtype=np.int16) + rng.integers(-20, 20, (size[1], size[0], 3))
            buf = io.BytesIO()
            Image.fromarray(np.clip(arr, 0, 255).astype(np.uint8)).save(buf, "JPEG", quality=90)
            p.write_bytes(buf.getvalue())
        paths.append(p)
    return paths


class JpegFolder:
    """ImageSource over JPEG files (decoded with the harness's own reader)."""

    def __init__(self, paths: list[Path]):
        self.paths = list(paths)

    def __len__(self) -> int:
        return len(self.paths)

    def load_image(self, i: int):
        from harness.data.io import load_rgb

        return load_rgb(self.paths[i])

    def fingerprint(self) -> str:
        return "jpegs-" + str(len(self.paths)) + "-" + self.paths[0].parent.name


@contextmanager
def _autocast(precision: str):
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16"):
        yield


def _timm_model(arch: str, size: int):
    import timm

    return timm.create_model(arch, pretrained=False, num_classes=0, img_size=size).eval()


class TimmCase:
    """Plain timm forward_features on random tensors (no decode), default intra-op threads."""

    def __init__(self, arch: str, size: int, batch: int, precision: str):
        self.model = _timm_model(arch, size)
        self.x = torch.randn(batch, 3, size, size, generator=torch.Generator().manual_seed(0))
        self.batch, self.precision = batch, precision
        with torch.inference_mode(), _autocast(precision):
            self.model.forward_features(self.x[:1])  # warm-up

    def __call__(self, n: int) -> dict:
        with torch.inference_mode(), _autocast(self.precision):
            with RssSampler() as rss:
                t, c, done = time.perf_counter(), time.process_time(), 0
                while done < n:
                    b = min(self.batch, n - done)
                    self.model.forward_features(self.x[:b])
                    done += b
                wall, cpu = time.perf_counter() - t, time.process_time() - c
        return {"wall_s": wall, "cpu_s": cpu, "rss_mb": rss.peak_mb, "rss_growth_mb": rss.peak_mb - rss.start_mb,
                "stages": {}}


class HarnessCase:
    """harness.features.extract.extract_features over JPEG files into a fresh feature cache."""

    def __init__(self, engine: str, arch: str, size: int, paths: list[Path], batch: int, precision: str,
                 threads: int, model=None):
        from harness.data.transforms import ResizeCenterCrop
        from harness.models.handle import ModelHandle

        self.model = model or ModelHandle.random_init(arch, seed=0, img_size=size)
        self.tf = ResizeCenterCrop(resize=size * 8 // 7, crop=size)
        self.paths = paths
        self.kw = dict(n_last_blocks=1, patches=True, patch_dtype="float32", batch_size=batch, progress=False,
                       precision=precision, engine=engine, threads=threads)
        self._extract(paths[:1])  # warm-up

    def _extract(self, paths):
        from harness.features.extract import extract_features

        with tempfile.TemporaryDirectory() as cache:
            return extract_features(self.model, JpegFolder(paths), self.tf, cache_dir=Path(cache), **self.kw)

    def __call__(self, n: int) -> dict:
        with RssSampler() as rss:
            t, c = time.perf_counter(), time.process_time()
            fs = self._extract(self.paths[:n])
            wall, cpu = time.perf_counter() - t, time.process_time() - c
        return {"wall_s": wall, "cpu_s": cpu, "rss_mb": rss.peak_mb, "rss_growth_mb": rss.peak_mb - rss.start_mb,
                "stages": fs.stages}


def _peak_pair(before: dict, after: dict) -> tuple[float, float]:
    g = (before["peak"].gflops + after["peak"].gflops) / 2
    c = (before["peak"].cpu_gflops + after["peak"].cpu_gflops) / 2
    return g, c


def plan(archs, sizes, precisions, budget_gflop: float, threads: int, bf16_max_gflop: float):
    """(arch, size, precision, n_images, batch) per case, sized by a FLOP budget."""
    out = []
    for precision in precisions:
        for a in archs:
            for s in sizes:
                per_img = shape_flops(VitShape.of_arch(ARCHS[a]), s, s) / 1e9
                budget = budget_gflop if precision == "fp32" else bf16_max_gflop
                n = max(threads, int(budget // per_img))
                if precision == "bf16" and per_img * threads > bf16_max_gflop:
                    continue  # emulated bf16 would blow the time budget
                n = min(n, 64)
                n = max(threads, (n // threads) * threads)
                # several batches, so the loaders' work can overlap the forward
                batch = min(32, max(threads, threads * math.ceil(n / (3 * threads))))
                out.append((a, s, precision, n, batch))
    return out


def _median(xs):
    xs = sorted(x for x in xs if x is not None)
    if not xs:
        return None
    m = len(xs) // 2
    return xs[m] if len(xs) % 2 else (xs[m - 1] + xs[m]) / 2


def run(archs=("S", "B"), sizes=(224, 448), precisions=("fp32", "bf16"), modes=MODES, budget_gflop=250.0,
        bf16_max_gflop=40.0, threads: int | None = None, repeats: int = 1, peak_secs: float = 0.3,
        log=print) -> dict:
    """Cases of one (arch, size, precision) run back to back, `repeats` rounds in alternating
    order (timm, plain, threads, timm, ...), each followed by a peak measurement; a row gives
    the median over rounds of each figure (the ratios are taken per round first)."""
    threads = threads or torch.get_num_threads()
    torch.set_num_threads(threads)
    cases = plan(archs, sizes, precisions, budget_gflop, threads, bf16_max_gflop)
    n_max = max((c[3] for c in cases), default=1)
    paths = make_jpegs(Path(tempfile.gettempdir()) / "ssl-bench-perf-jpegs", n_max)
    peaks = {"fp32": [matmul_peak("fp32", threads=threads, secs=peak_secs, repeats=2)]}
    if "bf16" in precisions:
        peaks["bf16"] = [matmul_peak("bf16", threads=threads, secs=peak_secs, repeats=1)]
    log(f"fp32 peak {peaks['fp32'][0]['peak'].gflops:.1f} GFLOP/s"
        + (f", bf16 peak {peaks['bf16'][0]['peak'].gflops:.2f} GFLOP/s" if "bf16" in peaks else "")
        + f" (load {os.getloadavg()[0]:.1f})")
    rows = []
    for a, s, precision, n, batch in cases:
        per_img = shape_flops(VitShape.of_arch(ARCHS[a]), s, s)
        runners, model = {}, None
        for mode in modes:
            if mode == "timm":
                runners[mode] = TimmCase(ARCHS[a], s, batch, precision)
            else:
                runners[mode] = HarnessCase(mode, ARCHS[a], s, paths[:n], batch, precision, threads, model)
                model = runners[mode].model  # one set of weights for both engines
        samples: dict[str, list[dict]] = {m: [] for m in modes}
        for _ in range(repeats):
            for mode in modes:
                before = peaks["fp32"][-1]
                load0 = os.getloadavg()[0]
                r = runners[mode](n)
                after = matmul_peak("fp32", threads=threads, secs=peak_secs, repeats=2)
                peaks["fp32"].append(after)
                g_peak, c_peak = _peak_pair(before, after)
                r["gflops"] = per_img * n / r["wall_s"] / 1e9
                r["cpu_gflops"] = per_img * n / max(r["cpu_s"], 1e-9) / 1e9
                r["roof_fp32"], r["roof_fp32_cpu"], r["peak"] = r["gflops"] / g_peak, r["cpu_gflops"] / c_peak, g_peak
                r["load"] = (load0 + os.getloadavg()[0]) / 2
                samples[mode].append(r)
        del runners
        for mode in modes:
            rs = samples[mode]
            med = {k: _median([r[k] for r in rs]) for k in ("wall_s", "gflops", "cpu_gflops", "roof_fp32",
                                                             "roof_fp32_cpu", "peak", "rss_mb", "load")}
            st = {k: _median([r["stages"].get(k) for r in rs]) for k in ("outside_forward_share", "wait_s")}
            row = {"case": f"ViT-{a}/16 {s} {precision} {mode}", "arch": a, "size": s, "precision": precision,
                   "mode": mode, "images": n, "batch": batch, "repeats": repeats, "img_s": n / med["wall_s"],
                   "gflops": med["gflops"], "roof_fp32": med["roof_fp32"], "roof_fp32_cpu": med["roof_fp32_cpu"],
                   "peak_fp32_gflops": med["peak"], "rss_mb": max(r["rss_mb"] for r in rs),
                   "rss_growth_mb": max(r["rss_growth_mb"] for r in rs),
                   "outside_fwd": st["outside_forward_share"], "wait_s": st["wait_s"],
                   "stages": rs[-1]["stages"], "load": med["load"],
                   "all_roof_fp32": [round(r["roof_fp32"], 3) for r in rs]}
            if precision == "bf16":
                bp = peaks["bf16"][0]["peak"]
                row["roof_bf16"] = med["gflops"] / bp.gflops
                row["roof_bf16_cpu"] = med["cpu_gflops"] / bp.cpu_gflops
            rows.append(row)
            log(format_row(row))
    if "bf16" in precisions:
        peaks["bf16"].append(matmul_peak("bf16", threads=threads, secs=peak_secs, repeats=1))
    return {"rows": rows, "threads": threads,
            "peaks": {k: [{"omp": p["omp"].as_dict(), "streams": p["streams"].as_dict(),
                           "peak": p["peak"].as_dict(), "size": p["size"], "load": p["load"]} for p in v]
                      for k, v in peaks.items()}}


HEADER = ("| case | imgs | img/s | GFLOP/s | fp32 roofline | per CPU-s | bf16 roofline | peak RSS MB (growth) "
          "| outside fwd | fwd waited s | load |\n|---|---|---|---|---|---|---|---|---|---|---|")


def _pct(x) -> str:
    return "-" if x is None else f"{100 * x:.0f}%"


def format_row(r: dict) -> str:
    bf = _pct(r.get("roof_bf16")) if r["precision"] == "bf16" else "-"
    wait = "-" if r.get("wait_s") is None else f"{r['wait_s']:.2f}"
    return (f"| {r['case']} | {r['images']} | {r['img_s']:.2f} | {r['gflops']:.1f} | {_pct(r['roof_fp32'])} "
            f"| {_pct(r['roof_fp32_cpu'])} | {bf} | {r['rss_mb']:.0f} (+{r['rss_growth_mb']:.0f}) "
            f"| {_pct(r.get('outside_fwd'))} | {wait} "
            f"| {r['load']:.1f} |")


def format_table(rows: list[dict]) -> str:
    return "\n".join([HEADER] + [format_row(r) for r in rows])


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--archs", default="S,B", help="comma list of S, B")
    ap.add_argument("--sizes", default="224,448")
    ap.add_argument("--precisions", default="fp32,bf16")
    ap.add_argument("--modes", default=",".join(MODES))
    ap.add_argument("--budget", type=float, default=250.0, help="GFLOP per fp32 case (sets the image count)")
    ap.add_argument("--bf16-budget", type=float, default=40.0, help="GFLOP cap per bf16 case")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=2, help="rounds per case (median reported)")
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    print(f"load average {os.getloadavg()}, torch {torch.__version__}, {args.threads} threads")
    print(HEADER)
    out = run(args.archs.split(","), [int(s) for s in args.sizes.split(",")], args.precisions.split(","),
              args.modes.split(","), args.budget, args.bf16_budget, args.threads, args.repeats)
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2, default=str))
    return out


if __name__ == "__main__":
    main()
