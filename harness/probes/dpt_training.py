"""Probe3D's training recipe for its dense probes (train_snorm.py / train_depth.py, configs
ten_epoch.yaml and nyu.yaml; evals/datasets/nyu.py and utils.py get_nyu_transforms, commit a1f1464).

- Schedule (optim.py cosine_decay_linear_warmup, through LambdaLR stepped every batch): the
  factor rises linearly from 0.01 to 1 over ``warmup`` steps, then follows 0.99 cos(pi/2 r) + 0.01
  to the last step; step k of the run uses the factor at k.
- Frames: ImageNet-normalised, cut to a centred square (nyu.py center_crop: columns 80:-80 of a
  480 x 640 frame).
- Training augmentation (augment_train; ``trainval`` contains "train"): colour jitter (0.2 each of
  brightness, contrast, saturation and hue, in a random order) with p 0.8 before normalisation;
  then, shared by image, depth and normals, a square RandomResizedCrop of 0.5-1 of the area back to
  the frame's size (nearest neighbour) with p 0.5. The flip and the rotation are there with p 0
  (rotateflip False), so they are left out. Draws come from numpy's Generator([seed, epoch, i]).
"""
from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F
import torchvision.transforms.functional as TF


def schedule_factor(step: int, max_step: float, warmup_step: float, min_factor: float = 0.01) -> float:
    if max_step <= warmup_step:
        raise ValueError(f"the schedule needs more steps ({max_step}) than warm-up steps ({warmup_step})")
    span = 1 - min_factor
    if step <= warmup_step:
        return span * (step / warmup_step) + min_factor
    rel = (step - warmup_step) / (max_step - warmup_step)
    return span * math.cos(0.5 * rel * math.pi) + min_factor


def square_crop(x: torch.Tensor) -> torch.Tensor:
    """The centred square of a (..., H, W) frame wider than tall (nyu.py: [..., 80:-80] of 640)."""
    h, w = x.shape[-2:]
    cut = (w - h) // 2
    return x[..., cut:w - cut] if cut > 0 else x


def colour_jitter(img: torch.Tensor, rng: np.random.Generator, strength: float = 0.2) -> torch.Tensor:
    """torchvision ColorJitter(s, s, s, s) on a (3, H, W) image in [0, 1], its draws from ``rng``."""
    factors = [rng.uniform(1 - strength, 1 + strength) for _ in range(3)] + [rng.uniform(-strength, strength)]
    ops = (TF.adjust_brightness, TF.adjust_contrast, TF.adjust_saturation, TF.adjust_hue)
    for k in rng.permutation(4):
        img = ops[k](img, float(factors[k]))
    return img


def resized_crop(maps: list[torch.Tensor], rng: np.random.Generator, scale=(0.5, 1.0)) -> list[torch.Tensor]:
    """One square crop of ``scale`` of the area, at a uniform position, of every (C, H, W) map,
    resized back to H x W by nearest neighbour (albumentations RandomResizedCrop, ratio 1)."""
    h, w = maps[0].shape[-2:]
    for _ in range(10):
        side = int(round(math.sqrt(h * w * rng.uniform(*scale))))
        if side <= min(h, w):
            top, left = int(rng.integers(0, h - side + 1)), int(rng.integers(0, w - side + 1))
            break
    else:
        side = min(h, w)
        top, left = (h - side) // 2, (w - side) // 2
    return [F.interpolate(m[None, :, top:top + side, left:left + side], size=(h, w), mode="nearest")[0]
            for m in maps]


class Frames(torch.utils.data.Dataset):
    """(image (3, S, S) normalised, depth (1, S, S), normals (3, S, S)) of a reader's frames;
    augmented when ``epoch`` is given."""

    def __init__(self, data, cfg, epoch: int | None = None):
        self.data, self.cfg, self.epoch = data, cfg, epoch

    def __len__(self):
        return len(self.data)

    def __getitem__(self, i):
        cfg = self.cfg
        img = torch.from_numpy(self.data.load_image(i)).permute(2, 0, 1).float() / 255.0
        depth = torch.from_numpy(self.data.load_depth(i))[None]
        normals = torch.from_numpy(self.data.load_normals(i))
        rng = np.random.default_rng([cfg.seed, self.epoch, i]) if self.epoch is not None else None
        jitter = rng is not None and cfg.augment and rng.random() < cfg.jitter_p
        if jitter and not cfg.jitter_after_normalize:
            img = colour_jitter(img, rng, cfg.jitter)
        img = TF.normalize(img, cfg.norm_mean, cfg.norm_std)
        if jitter and cfg.jitter_after_normalize:  # quirk kept: ColorJitter clamps the normalised image to [0, 1]
            img = colour_jitter(img, rng, cfg.jitter)
        if cfg.center_crop:
            img, depth, normals = square_crop(img), square_crop(depth), square_crop(normals)
        if rng is not None and cfg.augment and rng.random() < cfg.resized_crop_p:
            img, depth, normals = resized_crop([img, depth, normals], rng, tuple(cfg.resized_crop_scale))
        return img, depth, normals
