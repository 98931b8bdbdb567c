"""open-hummingbird-eval's memory-bank augmentation, deterministic by (seed, epoch, image).

The reference (`hbird/utils/transforms.py` get_hbird_train_transforms, applied through
`CombTransforms`) does, per training image and augmentation epoch:

1. image only: four independent ``RandomApply([ColorJitter(x=0.1)], p=0.5)`` for
   brightness, contrast, saturation and hue, in that order, on the PIL image;
2. ``ToTensor`` + ``Normalize(IMAGENET_MEAN, IMAGENET_STD)`` (std with the 0.255 typo);
3. image and mask together (`hbird/utils/image_transformations.py` RandomResizedCrop):
   ``transforms.RandomResizedCrop.get_params(scale=(0.5, 2.0), ratio=(3/4, 4/3))`` then
   ``resized_crop`` to input_size x input_size, bilinear with antialias for the image
   tensor, nearest for the mask tensor.

A scale above 1 cannot be drawn as a crop: get_params retries up to 10 times for a box
inside the image and otherwise falls back to the central crop of the whole image (aspect
clamped to the ratio range); the effective scale range is therefore (0.5, 1] plus a
fallback to the full image. The reference draws from the global RNGs in data-loader
order; here every draw comes from a generator keyed by (seed, epoch, image stem), so a
crop does not depend on which other images are in the bank, on batch order or workers,
and nested subsets of one seed see the same crops (their features can be shared).
"""
from __future__ import annotations

import zlib
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from harness.config import fingerprint
from harness.data.io import content_stamp
from harness.data.transforms import IMAGENET_MEAN, IMAGENET_STD, TF, interpolation_mode, random_resized_crop_box


@dataclass(frozen=True)
class HbirdAugment:
    input_size: int = 224
    scale: tuple = (0.5, 2.0)
    ratio: tuple = (3.0 / 4.0, 4.0 / 3.0)
    jitter: float = 0.1
    jitter_p: float = 0.5
    mean: tuple = IMAGENET_MEAN
    std: tuple = IMAGENET_STD

    def generator(self, seed: int, epoch: int, stem: str) -> torch.Generator:
        words = [int(seed) & 0xFFFFFFFF, int(epoch), zlib.crc32(stem.encode())]
        state = np.random.SeedSequence(words).generate_state(1, np.uint64)[0]
        return torch.Generator().manual_seed(int(state >> 1))

    def crop_params(self, g: torch.Generator, height: int, width: int) -> tuple[int, int, int, int]:
        """torchvision RandomResizedCrop.get_params with draws from ``g``."""
        return random_resized_crop_box(width, height, self.scale, self.ratio, g)

    def jitter_params(self, g: torch.Generator) -> list[tuple[str, float] | None]:
        """Per component (brightness, contrast, saturation, hue): None or the factor."""
        out = []
        for name in ("brightness", "contrast", "saturation", "hue"):
            apply = not (self.jitter_p < torch.rand(1, generator=g).item())  # RandomApply
            if not apply:
                out.append(None)
                continue
            if name == "hue":
                factor = torch.empty(1).uniform_(-self.jitter, self.jitter, generator=g).item()
            else:
                factor = torch.empty(1).uniform_(max(0.0, 1 - self.jitter), 1 + self.jitter, generator=g).item()
            out.append((name, factor))
        return out

    def params(self, seed: int, epoch: int, stem: str, height: int, width: int):
        g = self.generator(seed, epoch, stem)
        jit = self.jitter_params(g)  # the reference jitters first, then crops
        return jit, self.crop_params(g, height, width)

    def image(self, img, seed: int, epoch: int, stem: str) -> torch.Tensor:
        jit, (i, j, h, w) = self.params(seed, epoch, stem, img.height, img.width)
        for item in jit:
            if item is None:
                continue
            name, factor = item
            img = {"brightness": TF.adjust_brightness, "contrast": TF.adjust_contrast,
                   "saturation": TF.adjust_saturation, "hue": TF.adjust_hue}[name](img, factor)
        t = TF.normalize(TF.to_tensor(img), list(self.mean), list(self.std))
        size = [self.input_size, self.input_size]
        return TF.resized_crop(t, i, j, h, w, size, interpolation=interpolation_mode("bilinear"), antialias=True)

    def mask(self, mask: np.ndarray, seed: int, epoch: int, stem: str) -> np.ndarray:
        _, (i, j, h, w) = self.params(seed, epoch, stem, mask.shape[0], mask.shape[1])
        t = torch.from_numpy(np.ascontiguousarray(mask, dtype=np.uint8))[None, None, i:i + h, j:j + w].float()
        out = F.interpolate(t, size=(self.input_size, self.input_size), mode="nearest")
        return out[0, 0].to(torch.uint8).numpy()

    def fingerprint(self) -> str:
        return fingerprint({"kind": "hbird_augment", "input_size": self.input_size, "scale": list(self.scale),
                            "ratio": list(self.ratio), "jitter": self.jitter, "jitter_p": self.jitter_p,
                            "mean": list(self.mean), "std": list(self.std)})


class AugmentedView:
    """An ImageSource (for harness.features.extract.extract_features) of the augmented crops of one
    (seed, epoch); ``load_mask`` gives each crop's mask."""

    def __init__(self, dataset, aug: HbirdAugment, seed: int, epoch: int):
        self.dataset, self.aug, self.seed, self.epoch = dataset, aug, seed, epoch
        self.stems = list(dataset.stems)

    def __len__(self) -> int:
        return len(self.stems)

    def load_image(self, i: int) -> torch.Tensor:
        return self.aug.image(self.dataset.load_image(i), self.seed, self.epoch, self.stems[i])

    def load_mask(self, i: int) -> np.ndarray:
        return self.aug.mask(np.asarray(self.dataset.load_mask(i)), self.seed, self.epoch, self.stems[i])

    def content_stamp(self) -> str | None:
        return content_stamp(self.dataset)

    def fingerprint(self) -> str:
        return fingerprint({"data": self.dataset.fingerprint(), "aug": self.aug.fingerprint(),
                            "seed": self.seed, "epoch": self.epoch})


@dataclass(frozen=True)
class PreparedTensor:
    """Transform for sources that already return normalised tensors (AugmentedView)."""

    fixed_size = True

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return x

    def fingerprint(self) -> str:
        return fingerprint({"kind": "prepared_tensor"})


def torch_nearest_resize(mask: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """Mask resize as torchvision does it on tensors (legacy 'nearest': source index =
    floor(dst * in / out)), which is what open-hummingbird-eval's paired Resize applies to
    masks; PIL's NEAREST samples pixel centres instead and differs on some rows/columns."""
    if mask.shape == tuple(size):
        return mask
    t = torch.from_numpy(np.ascontiguousarray(mask, dtype=np.uint8))[None, None].float()
    return F.interpolate(t, size=tuple(size), mode="nearest")[0, 0].to(torch.uint8).numpy()
