"""Two reference learners for the CPU budget: how much of SynthScenes a tiny ViT can learn
in a few hundred steps when the signal is easy. Not methods of the registry: yardsticks for
the registered methods' CPU presets (docs/findings/synthscenes.md, "What the object classes ask").

- ``supervised``: the suites' supervised context row (harness/context/supervised.py): the
  object-centric train split with its labels, colours randomised, cross-entropy over [CLS].
- ``simclr``: instance contrast (NT-Xent, temperature 0.2, 2-layer projector) between the two
  global crops of the DINO CPU preset's augmentation, on the pretraining images, no labels.

Both use AdamW at a constant learning rate and return the trained backbone.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from tqdm import tqdm

from harness.models.backbone import create_backbone
from harness.config import load_config
from harness.data.io import load_rgb
from harness.context.supervised import SupervisedSpec
from harness.context.supervised import train_supervised as train_supervised_backbone
from harness.models.handle import ModelHandle
from methods.shared import MultiCropAugmentation, MultiCropConfig, list_pretrain_images, sample_rng


def train_supervised(root: Path, steps: int = 400, batch_size: int = 64, lr: float = 1e-3,
                     arch: str = "vit_cpu_tiny", seed: int = 0) -> ModelHandle:
    """The suites' supervised context row (harness.context.supervised) on the object-centric
    split of the SynthScenes ``root``."""
    spec = SupervisedSpec(arch=arch, steps=steps, batch_size=batch_size, lr=lr, seed=seed)
    return ModelHandle(f"supervised {steps} steps", train_supervised_backbone(spec, Path(root) / "imagenet"),
                       {"method": "supervised"})


def train_simclr(root: Path, steps: int = 200, batch_size: int = 128, lr: float = 1e-3,
                 temperature: float = 0.2, arch: str = "vit_cpu_tiny", seed: int = 0) -> ModelHandle:
    torch.manual_seed(seed)
    crops = dict(load_config("methods/dino_cpu.yaml")["method"]["crops"], local_crops_number=0)
    augment = MultiCropAugmentation(MultiCropConfig(**crops))
    images = [load_rgb(p) for p in list_pretrain_images(root)]
    backbone = create_backbone(arch, drop_path_rate=0.0)
    projector = nn.Sequential(nn.Linear(backbone.embed_dim, 256), nn.GELU(), nn.Linear(256, 128))
    opt = torch.optim.AdamW([*backbone.parameters(), *projector.parameters()], lr=lr, weight_decay=0.05)
    rng = np.random.default_rng(seed)
    targets = torch.cat([torch.arange(batch_size, 2 * batch_size), torch.arange(batch_size)])
    for step in tqdm(range(steps), desc="simclr", unit="step"):
        views = [augment(images[i], sample_rng(seed, step, int(i))) for i in rng.integers(0, len(images), batch_size)]
        x = torch.cat([torch.stack([v[0] for v in views]), torch.stack([v[1] for v in views])])
        z = F.normalize(projector(backbone.forward_features(x)[:, 0]), dim=1)
        sims = (z @ z.T / temperature).fill_diagonal_(float("-inf"))
        loss = F.cross_entropy(sims, targets)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    return ModelHandle(f"simclr {steps} steps", backbone.eval(), {"method": "simclr"})


REFERENCES = {"supervised": train_supervised, "simclr": train_simclr}
