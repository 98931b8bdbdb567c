"""Two reference learners for the CPU budget: how much of SynthScenes a tiny ViT can learn
in a few hundred steps when the signal is easy. Not methods of the registry: yardsticks for
the registered methods' CPU presets (docs/BENCHMARKS.md, "What the object classes ask").

- ``supervised``: the object-centric train split with its labels, cross-entropy on a linear
  layer over [CLS]; colours randomised per image (channel permutation, grey with p 0.5) and
  horizontal flips, so that colour is as useless as in pretraining.
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

from benchmarks.classification_common import load_splits
from harness.backbone import create_backbone
from harness.config import load_config
from harness.data.io import load_rgb
from harness.data.transforms import IMAGENET_MEAN, IMAGENET_STD
from harness.models import ModelHandle
from methods.shared import MultiCropAugmentation, MultiCropConfig, list_pretrain_images, sample_rng

_MEAN = torch.tensor(IMAGENET_MEAN).view(1, 3, 1, 1)
_STD = torch.tensor(IMAGENET_STD).view(1, 3, 1, 1)


def _object_train_split(root: Path) -> tuple[torch.Tensor, torch.Tensor]:
    """(N, 3, H, W) float images in [0, 1] and labels of the object-centric train split."""
    splits = load_splits("imagefolder", root / "imagenet", "train", "val")
    images = [torch.from_numpy(np.asarray(splits.train.load_image(i), dtype=np.float32) / 255.0)
              for i in range(len(splits.train))]
    return torch.stack(images).permute(0, 3, 1, 2).contiguous(), torch.from_numpy(splits.train_labels)


def _randomise_colour(x: torch.Tensor, g: torch.Generator) -> torch.Tensor:
    perm = torch.stack([torch.randperm(3, generator=g) for _ in range(len(x))])
    x = torch.gather(x, 1, perm[:, :, None, None].expand_as(x))
    grey = torch.rand(len(x), generator=g) < 0.5
    x[grey] = x[grey].mean(1, keepdim=True).expand(-1, 3, -1, -1)
    flip = torch.rand(len(x), generator=g) < 0.5
    x[flip] = x[flip].flip(-1)
    return (x - _MEAN) / _STD


def train_supervised(root: Path, steps: int = 400, batch_size: int = 64, lr: float = 1e-3,
                     arch: str = "vit_cpu_tiny", seed: int = 0) -> ModelHandle:
    torch.manual_seed(seed)
    images, labels = _object_train_split(root)
    backbone = create_backbone(arch)
    head = nn.Linear(backbone.embed_dim, int(labels.max()) + 1)
    opt = torch.optim.AdamW([*backbone.parameters(), *head.parameters()], lr=lr, weight_decay=0.05)
    g = torch.Generator().manual_seed(seed)
    for _ in tqdm(range(steps), desc="supervised", unit="step"):
        idx = torch.randint(0, len(images), (batch_size,), generator=g)
        logits = head(backbone.forward_features(_randomise_colour(images[idx].clone(), g))[:, 0])
        loss = F.cross_entropy(logits, labels[idx])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    return ModelHandle(f"supervised {steps} steps", backbone.eval(), {"method": "supervised"})


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
