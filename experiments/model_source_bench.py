"""Feature extraction through the timm model source against the harness's own ViT, on the
same weights: what the adapter (forward_intermediates, token split, re-normalisation check)
costs.

    python -m experiments.model_source_bench                      # ViT-S/16 at 224, 256 images
    python -m experiments.model_source_bench --images 128 --repeats 3

Both models are built from one random ViT-S/16 weights file: ``timm:vit_small_patch16_224.dino``
(the timm source) and the same file converted with ``zoo convert --pos-interp timm`` (the
native path). Each round extracts the CLS and patch features of the same in-memory images
with ``extract_features`` (no cache: every round computes), once per path, in alternating
order; the table gives the median seconds per path, their ratio and the median of the
rounds' ratios (each round runs both paths back to back, so a shared machine's load cancels
out of it), the forward threads' CPU seconds (the extraction's ``forward_s`` stage: the
compute itself, which other jobs on the machine do not inflate as they do wall time), and
checks that the two paths gave the same features.
"""
from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from PIL import Image

from harness.data.transforms import ResizeCenterCrop
from harness.models.importers import import_checkpoint
from harness.models.sources import build_model
from harness.features.extract import extract_features


class RandomImages:
    """Seeded RGB images held in memory (no decoding cost to hide the forward's)."""

    def __init__(self, n: int, size: int, seed: int = 0):
        rng = np.random.default_rng(seed)
        self.images = [Image.fromarray(rng.integers(0, 256, (size, size, 3), dtype=np.uint8)) for _ in range(n)]
        self.seed = seed

    def __len__(self) -> int:
        return len(self.images)

    def load_image(self, i: int):
        return self.images[i]

    def fingerprint(self) -> str:
        return f"random-images-{len(self)}-{self.seed}"


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--images", type=int, default=256)
    p.add_argument("--size", type=int, default=224)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--batch-size", type=int, default=64)
    a = p.parse_args(argv)

    import timm
    from safetensors.torch import save_file

    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        torch.manual_seed(0)
        vit = timm.create_model("vit_small_patch16_224", pretrained=False, num_classes=0)
        save_file({k: v.contiguous() for k, v in vit.state_dict().items()}, str(tmp / "vit.safetensors"))
        import_checkpoint(tmp / "vit.safetensors", tmp / "native", meta={"pos_interp": "timm"})
        models = {"timm source": build_model(f"timm:vit_small_patch16_224.dino,weights={tmp / 'vit.safetensors'}"),
                  "native ViT": build_model(f"checkpoint:{tmp / 'native.safetensors'}")}
        source = RandomImages(a.images, a.size)
        transform = ResizeCenterCrop(resize=a.size, crop=a.size)
        seconds: dict[str, list[float]] = {k: [] for k in models}
        forward_cpu: dict[str, list[float]] = {k: [] for k in models}
        outputs = {}
        for r in range(a.repeats):
            order = list(models) if r % 2 == 0 else list(reversed(models))
            for name in order:
                t0 = time.perf_counter()
                fs = extract_features(models[name], source, transform, patches=True, batch_size=a.batch_size,
                                      cache=False, progress=False)
                seconds[name].append(time.perf_counter() - t0)
                forward_cpu[name].append(fs.stages["forward_s"])
                outputs[name] = fs
        same = (np.array_equal(outputs["timm source"].cls, outputs["native ViT"].cls)
                and np.array_equal(outputs["timm source"].patch_flat, outputs["native ViT"].patch_flat))
    print(f"ViT-S/16, {a.images} images at {a.size}, batch {a.batch_size}, {torch.get_num_threads()} threads, "
          f"{a.repeats} rounds (median)")
    med = {k: statistics.median(v) for k, v in seconds.items()}
    for name, s in med.items():
        rounds = ", ".join(f"{x:.2f}" for x in seconds[name])
        print(f"  {name:12s} {s:7.2f} s  ({a.images / s:6.1f} img/s)   rounds: {rounds}")
    for name, cpu in forward_cpu.items():
        rounds = ", ".join(f"{x:.2f}" for x in cpu)
        print(f"  {name:12s} forward CPU {statistics.median(cpu):7.2f} s   rounds: {rounds}")
    cpu_ratio = statistics.median(forward_cpu["timm source"]) / statistics.median(forward_cpu["native ViT"])
    print(f"  forward CPU seconds, timm source / native: {cpu_ratio:.3f}")
    paired = statistics.median(t / n for t, n in zip(seconds["timm source"], seconds["native ViT"]))
    print(f"  timm source / native: {med['timm source'] / med['native ViT']:.3f} (medians), {paired:.3f} "
          f"(median of the rounds' ratios); features bit-identical: {same}")


if __name__ == "__main__":
    main()
