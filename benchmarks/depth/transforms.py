"""Images and depth maps into the probe, as dinov3/eval/depth/transforms.py prepares them.

Training (make_depth_train_transforms): the fixed crop (NYU's border, or KITTI's KB crop), then
with probability 1/2 a rotation by U(-2.5, 2.5) degrees (image bilinear, depth nearest, zeros
outside), a horizontal flip with probability 1/2, a random crop (416x544 on NYU), with
probability 1/2 the colour augmentation (gamma, brightness, per-channel colour, on the 0-255
scale, clipped), the ImageNet normalisation.
Evaluation: the full image, normalised; the horizontal flip as test-time augmentation.
Every random draw comes from one numpy Generator per (seed, epoch, image).
"""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
import torchvision.transforms.functional as TF
from torchvision.transforms import InterpolationMode

from harness.data.transforms import IMAGENET_MEAN, IMAGENET_STD


def nyu_crop_box(h: int, w: int, box=(43, 45, 608, 472), ref=(480, 640)) -> tuple[int, int, int, int]:
    """(y1, y2, x1, x2) of NYUCrop (transforms.py: x 43:608, y 45:472 of a 480x640 frame, the
    white border of NYU's registered frames) scaled to h x w with int() truncation."""
    x1, y1, x2, y2 = box
    return int(y1 / ref[0] * h), int(y2 / ref[0] * h), int(x1 / ref[1] * w), int(x2 / ref[1] * w)


def kb_crop_box(h: int, w: int, size=(352, 1216)) -> tuple[int, int, int, int]:
    """(y1, y2, x1, x2) of the KITTI benchmark crop (Monocular-Depth-Estimation-Toolbox
    pipelines/transforms.py KBCrop, commit d8aff50): the bottom ``size[0]`` rows, ``size[1]``
    columns centred with int() truncation, on images and ground truth alike."""
    top, left = int(h - size[0]), int((w - size[1]) / 2)
    return top, top + size[0], left, left + size[1]


def fixed_crop_box(h: int, w: int, fixed_crop: str, kb_size=(352, 1216)) -> tuple[int, int, int, int]:
    """The crop every training image gets first: NYU's border ("nyu"), KITTI's KB crop ("kb"),
    or none ("full")."""
    if fixed_crop == "nyu":
        return nyu_crop_box(h, w)
    if fixed_crop == "kb":
        return kb_crop_box(h, w, kb_size)
    return 0, h, 0, w


def to_tensor(rgb: np.ndarray) -> torch.Tensor:
    """(H, W, 3) uint8 -> (3, H, W) float in [0, 1] (torchvision ToTensor)."""
    return torch.from_numpy(np.array(rgb, dtype=np.uint8)).permute(2, 0, 1).float().div(255.0)


def normalize(img: torch.Tensor, mean=IMAGENET_MEAN, std=IMAGENET_STD) -> torch.Tensor:
    m = torch.tensor(mean, dtype=img.dtype)[:, None, None]
    s = torch.tensor(std, dtype=img.dtype)[:, None, None]
    return (img - m) / s


def colour_aug(img: torch.Tensor, rng: np.random.Generator, gamma=(0.9, 1.1), brightness=(0.75, 1.25),
               colour=(0.9, 1.1)) -> torch.Tensor:
    """transforms.py ColorAug on a [0, 1] image: on the 0-255 scale x**gamma (so gamma > 1
    brightens and clips), times a brightness, times a colour per channel, clipped to 0-255."""
    g = rng.uniform(min(gamma), max(gamma))
    b = rng.uniform(min(brightness), max(brightness))
    c = torch.tensor(rng.uniform(min(colour), max(colour), size=3), dtype=img.dtype)
    out = (img * 255) ** g * b * c[:, None, None]
    return out.clamp(0, 255) / 255


@dataclass
class TrainAugment:
    crop: tuple[int, int]              # random crop (h, w)
    fixed_crop: str = "nyu"            # "nyu" | "kb" | "full"
    rotation: float = 2.5              # max degrees; applied with probability 1/2
    brightness: tuple[float, float] = (0.75, 1.25)
    colour_p: float = 0.5
    kb_size: tuple[int, int] = (352, 1216)

    def __call__(self, rgb: np.ndarray, depth: np.ndarray, rng: np.random.Generator):
        """uint8 (H, W, 3) image, metres (H, W) -> normalised (3, h, w) image, (1, h, w) depth."""
        if self.fixed_crop != "full":
            y1, y2, x1, x2 = fixed_crop_box(*depth.shape, self.fixed_crop, self.kb_size)
            rgb, depth = rgb[y1:y2, x1:x2], depth[y1:y2, x1:x2]
        img = to_tensor(rgb)
        dep = torch.from_numpy(np.ascontiguousarray(depth, dtype=np.float32))[None]
        if rng.random() < 0.5 and self.rotation:
            angle = float(rng.uniform(-self.rotation, self.rotation))
            img = TF.rotate(img, angle, interpolation=InterpolationMode.BILINEAR)
            dep = TF.rotate(dep, angle, interpolation=InterpolationMode.NEAREST)
        if rng.random() < 0.5:
            img, dep = img.flip(-1), dep.flip(-1)
        h, w = self.crop
        top = int(rng.integers(0, img.shape[1] - h + 1))
        left = int(rng.integers(0, img.shape[2] - w + 1))
        img, dep = img[:, top:top + h, left:left + w], dep[:, top:top + h, left:left + w]
        if rng.random() < self.colour_p:
            img = colour_aug(img, rng, brightness=self.brightness)
        return normalize(img), dep


def center_pad(x: torch.Tensor, multiple: int) -> torch.Tensor:
    """embed.py CenterPadding: zero-pad H and W up to a multiple, the extra pixel at the end."""
    def pads(size):
        extra = math.ceil(size / multiple) * multiple - size
        return extra // 2, extra - extra // 2
    return F.pad(x, list(itertools.chain(pads(x.shape[-1]), pads(x.shape[-2]))))
