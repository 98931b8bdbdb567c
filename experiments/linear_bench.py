"""Linear-probe training throughput (images/s) on CPU threads: one augmented batch =
JPEG decode + RandomResizedCrop + flip, the frozen backbone's forward (no grad), and an SGD
step of every head of the grid (numbers: benchmarks/classification/README.md).

    python -m experiments.linear_bench                  # both settings below, 2 threads
    python -m experiments.linear_bench --only tiny

Settings: vit_small_patch16_224 at 224 px (ImageNet-sized 500x375 JPEGs, 1000 classes, last
4 CLS = 1536-d) and vit_cpu_tiny at 64 px (SynthScenes-sized JPEGs, 12 classes); each with
1 head (dino) and 45 heads (ibot). Random-init weights: the speed does not depend on them.
"""
from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from PIL import Image

from harness.probes.labelled_features import assemble
from harness.probes.linear_data import AugmentedImages, RandomResizedCropFlip, augmented_loader
from harness.probes.linear_grid import GridSGD, LinearHeads
from benchmarks.classification.linear_probe import IBOT_BASE_LRS, arch_feature_defaults
from harness.data.classification import ImageFolderDataset
from harness.features.extract import batch_features
from harness.models.handle import ModelHandle

SETTINGS = {
    "small": dict(arch="vit_small_patch16_224", crop=224, image=(500, 375), classes=1000, batch=64, batches=3),
    "tiny": dict(arch="vit_cpu_tiny", crop=64, image=(64, 64), classes=12, batch=128, batches=10),
}


def write_folder(root: Path, n: int, size: tuple[int, int]) -> ImageFolderDataset:
    rng = np.random.default_rng(0)
    for i in range(n):
        d = root / "train" / f"c{i % 4}"
        d.mkdir(parents=True, exist_ok=True)
        arr = rng.integers(0, 256, (size[1] // 8, size[0] // 8, 3), dtype=np.uint8)
        Image.fromarray(arr).resize(size, Image.BILINEAR).save(d / f"{i}.jpg", quality=90)
    return ImageFolderDataset(root, "train")


def bench(name: str, s: dict, heads_n: int, num_workers: int, tmp: Path) -> None:
    model = ModelHandle.random_init(s["arch"])
    backbone = model.backbone.eval()
    n_blocks, avgpool = arch_feature_defaults(backbone.embed_dim, len(backbone.blocks))
    ds = write_folder(tmp / name, s["batch"] * (s["batches"] + 1), s["image"])
    labels = np.asarray([i % s["classes"] for i in range(len(ds))])
    data = AugmentedImages(ds, labels, RandomResizedCropFlip(size=s["crop"]), seed=0)
    dim = backbone.embed_dim * (n_blocks + int(avgpool))
    heads = LinearHeads(heads_n, dim, s["classes"])
    opt = GridSGD(heads, torch.tensor(IBOT_BASE_LRS[:heads_n], dtype=torch.float64) * s["batch"] / 256)
    times, cpu = [], 0.0
    t, c = time.perf_counter(), time.process_time()
    for step, (images, y) in enumerate(augmented_loader(data, s["batch"], 0, False, num_workers)):
        t1 = time.perf_counter()
        with torch.no_grad():
            cls, pm = batch_features(backbone, images, n_last_blocks=n_blocks)
        x = assemble(cls, pm, n_last_blocks=n_blocks, avgpool=avgpool)
        t2 = time.perf_counter()
        logits = heads(x)
        loss = torch.nn.functional.cross_entropy(logits.permute(1, 2, 0), y.view(-1, 1).expand(-1, heads_n),
                                                 reduction="none").mean(0).sum()
        opt.zero_grad()
        loss.backward()
        opt.step(1.0)
        t3 = time.perf_counter()
        c3 = time.process_time()
        if step > 0:  # the first batch pays for warm-up
            times.append((t1 - t, t2 - t1, t3 - t2))
            cpu += c3 - c
        t, c = time.perf_counter(), time.process_time()
    load, fwd, head = (sum(v) / len(times) for v in zip(*times))
    total = load + fwd + head
    # On a shared box the wall clock includes waiting for the CPU; CPU seconds / threads is
    # what the same work takes when the cores are free (data loading runs on one thread).
    cpu_per_batch = cpu / len(times)
    print(f"{s['arch']:22s} {s['crop']:3d}px  batch {s['batch']:3d}  heads {heads_n:2d}  workers {num_workers}: "
          f"{s['batch'] / total:7.1f} img/s wall  (per batch: data {load:.3f} s, backbone {fwd:.3f} s, "
          f"heads {head:.3f} s; {len(times)} batches); CPU {cpu_per_batch:.2f} s/batch "
          f"-> >= {s['batch'] / cpu_per_batch:.1f} img/s per CPU core")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--workers", type=int, default=0)
    ap.add_argument("--only", choices=sorted(SETTINGS))
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, {args.threads} threads, load average {os.getloadavg()[0]:.1f}")
    with tempfile.TemporaryDirectory() as tmp:
        for name, s in SETTINGS.items():
            if args.only and name != args.only:
                continue
            for heads_n in (1, 45):
                bench(name, s, heads_n, args.workers, Path(tmp))


if __name__ == "__main__":
    main()
