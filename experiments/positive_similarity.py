"""Do a backbone's features already tell a contrastive method's positives apart?

A method whose keys come from a stop-gradient (EMA) teacher can only learn what those
keys already separate: if two crops of one image, or two renders of one caption, are no
closer than unrelated images, the student has nothing to follow. For each model this
takes ``--groups`` SynthScenes caption groups, cuts two global crops of a group's first
render and one of its second with a method preset's augmentation, and reports, on
batch-centred [CLS] and mean-patch features:

* ``instance_pos`` / ``caption_pos``: mean cosine of an image's crop with its other
  crop / with the other render's crop; ``neg``: mean cosine between different groups;
* ``instance_top1`` / ``caption_top1``: how often that positive is the nearest of the
  ``--groups`` candidates (chance 1 / groups).

    python -m experiments.positive_similarity [CKPT ...] [--preset methods/synclr_cpu.yaml]
"""
from __future__ import annotations

import argparse
from dataclasses import replace
from pathlib import Path

import pandas as pd
import torch
import torch.nn.functional as F

from harness.models.backbone import ARCHS
from harness.config import load_config
from harness.data.io import load_rgb
from harness.data.synthetic import default_root, generate
from harness.errors import DataError
from harness.models.handle import ModelHandle
from methods.shared import MultiCropAugmentation, MultiCropConfig, sample_rng
from methods.synclr import caption_groups


def positive_stats(anchor: torch.Tensor, instance: torch.Tensor, caption: torch.Tensor) -> dict[str, float]:
    """Similarity statistics of row-aligned (N, D) features: row i of ``instance`` and of
    ``caption`` is the positive of row i of ``anchor``; every other row is a negative."""
    mean = torch.cat([anchor, instance, caption]).mean(0)  # centre: a shared offset is no signal
    a, i, c = (F.normalize(x - mean, dim=1) for x in (anchor, instance, caption))
    n = a.shape[0]
    sim_i, sim_c = a @ i.T, a @ c.T
    off = ~torch.eye(n, dtype=torch.bool)
    target = torch.arange(n)
    return {"instance_pos": sim_i.diag().mean().item(), "caption_pos": sim_c.diag().mean().item(),
            "neg": sim_i[off].mean().item(),
            "instance_top1": (sim_i.argmax(1) == target).float().mean().item() * 100,
            "caption_top1": (sim_c.argmax(1) == target).float().mean().item() * 100}


def caption_crops(root: Path, crops: MultiCropConfig, groups: int, seed: int = 0) -> list[torch.Tensor]:
    """Anchor crop, its image's other crop and a crop of another render, for ``groups`` captions."""
    usable = caption_groups(root, min_images=2)[:groups]
    if len(usable) < groups:
        raise DataError(f"{root}: {len(usable)} caption groups with 2 renders, {groups} asked")
    augment = MultiCropAugmentation(replace(crops, global_crops_number=2, local_crops_number=0))
    anchor, instance, caption = [], [], []
    for i, renders in enumerate(usable):
        first = augment(load_rgb(renders[0]), sample_rng(seed, 0, i))
        second = augment(load_rgb(renders[1]), sample_rng(seed, 1, i))
        anchor.append(first[0])
        instance.append(first[1])
        caption.append(second[1])
    return [torch.stack(x) for x in (anchor, instance, caption)]


@torch.no_grad()
def model_stats(model: ModelHandle, views: list[torch.Tensor]) -> list[dict]:
    tokens = [model.backbone.forward_features(v) for v in views]
    return [{"model": model.name, "feature": name, **positive_stats(*[pick(t) for t in tokens])}
            for name, pick in (("cls", lambda t: t[:, 0]), ("avgpool", lambda t: t[:, 1:].mean(1)))]


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("checkpoints", nargs="*", type=Path, help="harness checkpoints (.safetensors)")
    ap.add_argument("--preset", default="methods/synclr_cpu.yaml", help="method config whose crops to use")
    ap.add_argument("--groups", type=int, default=128)
    ap.add_argument("--arch", default="vit_cpu_tiny", choices=sorted(ARCHS), help="random-init reference")
    ap.add_argument("--data-root", type=Path, default=None, help="SynthScenes root (default: generated small)")
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args(argv)
    torch.set_num_threads(a.threads)
    root = a.data_root or generate(default_root("small", 0), "small", 0, progress=False)
    crops = MultiCropConfig(**load_config(a.preset)["method"]["crops"])
    views = caption_crops(Path(root), crops, a.groups)
    models = [ModelHandle.random_init(a.arch, seed=0, name="random init")]
    models += [ModelHandle.from_checkpoint(p, name=p.parent.name or p.stem) for p in a.checkpoints]
    rows = [row for m in models for row in model_stats(m, views)]
    print(f"{a.groups} caption groups, crops of {a.preset}; top-1 chance {100 / a.groups:.1f}")
    print(pd.DataFrame(rows).to_string(index=False, float_format=lambda v: f"{v:.3f}"))


if __name__ == "__main__":
    main()
