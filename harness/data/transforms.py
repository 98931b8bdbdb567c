"""Evaluation transforms. Each has a `fingerprint()` (part of feature-cache keys and
protocol fingerprints) and maps a PIL image to a normalised tensor; segmentation
protocols use `mask()` to bring the label map to the same geometry."""
from __future__ import annotations

import importlib
import math

from dataclasses import asdict, dataclass
from typing import Callable, Literal

import numpy as np
import torch
from PIL import Image

from harness.config import fingerprint

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


class _Deferred:
    """A module imported at its first use: importing torchvision imports torch._dynamo (about a
    second), which a run that transforms no image (every record cached) does not need."""

    def __init__(self, name: str):
        self._name = name

    def __getattr__(self, attr: str):
        return getattr(importlib.import_module(self._name), attr)


TF = _Deferred("torchvision.transforms.functional")  # the functional transforms every protocol uses
INTERPOLATIONS = ("bicubic", "bilinear", "nearest")


def interpolation_mode(name: str):
    """torchvision's InterpolationMode of ``name`` (one of ``INTERPOLATIONS``)."""
    if name not in INTERPOLATIONS:
        raise KeyError(name)
    return getattr(importlib.import_module("torchvision.transforms").InterpolationMode, name.upper())


def _to_tensor(img: Image.Image, mean, std) -> torch.Tensor:
    t = TF.pil_to_tensor(img).float().div_(255.0)
    return TF.normalize(t, mean, std)


@dataclass(frozen=True)
class ResizeCenterCrop:
    """DINO's k-NN / linear-eval transform: Resize(short side) -> CenterCrop -> normalise."""

    resize: int = 256
    crop: int = 224
    interpolation: Literal["bicubic", "bilinear"] = "bicubic"
    mean: tuple = IMAGENET_MEAN
    std: tuple = IMAGENET_STD
    fixed_size = True

    def __call__(self, img: Image.Image) -> torch.Tensor:
        img = TF.resize(img, self.resize, interpolation=interpolation_mode(self.interpolation))
        img = TF.center_crop(img, [self.crop, self.crop])
        return _to_tensor(img, self.mean, self.std)

    def fingerprint(self) -> str:
        return fingerprint({"kind": "resize_center_crop", **asdict(self)})


@dataclass(frozen=True)
class PatchMultipleResize:
    """Down-sample to the closest size that is a multiple of the patch size, aspect kept
    (CrIBo's dense-NN preprocessing). ``max_side`` caps the longer side first (None = keep)."""

    patch_size: int = 16
    max_side: int | None = None
    interpolation: Literal["bicubic", "bilinear"] = "bilinear"
    mean: tuple = IMAGENET_MEAN
    std: tuple = IMAGENET_STD
    fixed_size = False

    def output_size(self, width: int, height: int) -> tuple[int, int]:
        scale = 1.0
        if self.max_side is not None and max(width, height) > self.max_side:
            scale = self.max_side / max(width, height)
        p = self.patch_size
        h = max(p, int(round(height * scale / p)) * p)
        w = max(p, int(round(width * scale / p)) * p)
        return h, w

    def __call__(self, img: Image.Image) -> torch.Tensor:
        h, w = self.output_size(*img.size)
        if (h, w) != (img.height, img.width):
            img = TF.resize(img, [h, w], interpolation=interpolation_mode(self.interpolation))
        return _to_tensor(img, self.mean, self.std)

    def mask(self, mask: np.ndarray) -> np.ndarray:
        h, w = self.output_size(mask.shape[1], mask.shape[0])
        return _resize_mask(mask, h, w)

    def fingerprint(self) -> str:
        return fingerprint({"kind": "patch_multiple_resize", **asdict(self)})


@dataclass(frozen=True)
class SquareResize:
    """Resize to size x size, aspect not kept (open-hummingbird-eval's evaluation)."""

    size: int = 224
    interpolation: Literal["bicubic", "bilinear"] = "bilinear"
    mean: tuple = IMAGENET_MEAN
    std: tuple = IMAGENET_STD
    fixed_size = True

    def __call__(self, img: Image.Image) -> torch.Tensor:
        img = TF.resize(img, [self.size, self.size], interpolation=interpolation_mode(self.interpolation))
        return _to_tensor(img, self.mean, self.std)

    def mask(self, mask: np.ndarray) -> np.ndarray:
        return _resize_mask(mask, self.size, self.size)

    def fingerprint(self) -> str:
        return fingerprint({"kind": "square_resize", **asdict(self)})


def _resize_mask(mask: np.ndarray, h: int, w: int) -> np.ndarray:
    if mask.shape == (h, w):
        return mask
    img = Image.fromarray(mask.astype(np.uint8))
    return np.asarray(img.resize((w, h), Image.NEAREST))


def rrc_box(height: int, width: int, ratio, draw_area_aspect: Callable[[], tuple[float, float]],
            randint: Callable[[int], int]) -> tuple[int, int, int, int]:
    """torchvision ``RandomResizedCrop.get_params`` with the random draws supplied by the
    caller (so each keeps its own RNG stream and precision): 10 tries of
    ``draw_area_aspect() -> (target area, aspect)``, offsets from ``randint(n) in [0, n)``
    (top first), then a centre crop clamped to the ratio range. Returns (top, left, h, w)."""
    for _ in range(10):
        target_area, aspect = draw_area_aspect()
        w = int(round(math.sqrt(target_area * aspect)))
        h = int(round(math.sqrt(target_area / aspect)))
        if 0 < w <= width and 0 < h <= height:
            top = randint(height - h + 1)
            left = randint(width - w + 1)
            return top, left, h, w
    in_ratio = float(width) / float(height)
    if in_ratio < min(ratio):
        w, h = width, int(round(width / min(ratio)))
    elif in_ratio > max(ratio):
        h, w = height, int(round(height * max(ratio)))
    else:
        w, h = width, height
    return (height - h) // 2, (width - w) // 2, h, w


def random_resized_crop_box(width: int, height: int, scale, ratio, g: torch.Generator) -> tuple[int, int, int, int]:
    """``rrc_box`` drawing from ``g`` instead of the global RNG: (top, left, h, w). float32
    log/exp as torchvision computes them, so the boxes equal torchvision's for the same
    random stream."""
    area = height * width
    log_ratio = torch.log(torch.tensor(ratio))

    def draw() -> tuple[float, float]:
        target_area = area * torch.empty(1).uniform_(scale[0], scale[1], generator=g).item()
        aspect = torch.exp(torch.empty(1).uniform_(log_ratio[0], log_ratio[1], generator=g)).item()
        return target_area, aspect

    return rrc_box(height, width, ratio, draw, lambda n: int(torch.randint(0, n, (1,), generator=g)))
