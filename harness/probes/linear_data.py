"""Training batches for the linear probe: augmented images (RandomResizedCrop + flip, drawn
from a generator seeded per (seed, epoch, image) so that a run is the same whatever the
number of DataLoader workers) or rows of cached features."""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Iterator, Literal

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, Sampler

from harness.config import fingerprint
from harness.data.transforms import IMAGENET_MEAN, IMAGENET_STD, TF, interpolation_mode, random_resized_crop_box

_INTERPOLATIONS = ("bilinear", "bicubic")  # what its crops resample with


def seeded_generator(*keys: int) -> torch.Generator:
    """A torch generator whose state depends only on the integer keys."""
    state = np.random.SeedSequence([int(k) for k in keys]).generate_state(2, dtype=np.uint32)
    return torch.Generator().manual_seed(int(state[0]) << 32 | int(state[1]))


# Stream ids, so shuffling and augmentation never draw from the same sequence.
STREAM_SHUFFLE, STREAM_AUGMENT, STREAM_INIT = 1, 2, 3


@dataclass(frozen=True)
class RandomResizedCropFlip:
    """torchvision's RandomResizedCrop(size) + RandomHorizontalFlip() (the DINO / iBOT /
    StableRep linear-probe training transform) with an explicit generator: the same crop
    sampling (10 tries of scale x log-uniform ratio, then a centre crop clamped to the
    ratio range), PIL resampling with antialias, then ImageNet normalisation."""

    size: int = 224
    scale: tuple = (0.08, 1.0)
    ratio: tuple = (3.0 / 4.0, 4.0 / 3.0)
    interpolation: Literal["bilinear", "bicubic"] = "bilinear"
    hflip: bool = True
    mean: tuple = IMAGENET_MEAN
    std: tuple = IMAGENET_STD

    def crop_box(self, width: int, height: int, g: torch.Generator) -> tuple[int, int, int, int]:
        return random_resized_crop_box(width, height, self.scale, self.ratio, g)

    def __call__(self, img, g: torch.Generator) -> torch.Tensor:
        if self.interpolation not in _INTERPOLATIONS:
            raise KeyError(self.interpolation)
        i, j, h, w = self.crop_box(img.width, img.height, g)
        img = TF.resized_crop(img, i, j, h, w, [self.size, self.size],
                              interpolation=interpolation_mode(self.interpolation), antialias=True)
        if self.hflip and torch.rand(1, generator=g).item() < 0.5:
            img = TF.hflip(img)
        # as ResizeCenterCrop (the val transform): uint8 -> [0, 1] -> normalise
        return TF.normalize(TF.pil_to_tensor(img).float().div_(255.0), self.mean, self.std)

    def fingerprint(self) -> str:
        return fingerprint({"kind": "random_resized_crop_flip", **asdict(self)})


class AugmentedImages(Dataset):
    """Items are keyed by (epoch, index): the augmentation of image i in epoch e is fixed."""

    def __init__(self, source, labels: np.ndarray, transform: RandomResizedCropFlip, seed: int):
        self.source, self.labels, self.transform, self.seed = source, labels, transform, seed

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, key: tuple[int, int]):
        epoch, i = key
        g = seeded_generator(self.seed, STREAM_AUGMENT, epoch, i)
        return self.transform(self.source.load_image(i), g), int(self.labels[i])


def epoch_order(n: int, seed: int, epoch: int) -> torch.Tensor:
    return torch.randperm(n, generator=seeded_generator(seed, STREAM_SHUFFLE, epoch))


def epoch_batches(n: int, batch_size: int, seed: int, epoch: int, drop_last: bool) -> list[torch.Tensor]:
    order = epoch_order(n, seed, epoch)
    stop = (n // batch_size) * batch_size if drop_last else n
    return [order[a:min(a + batch_size, stop)] for a in range(0, stop, batch_size)]


def steps_per_epoch(n: int, batch_size: int, drop_last: bool) -> int:
    return n // batch_size if drop_last else math.ceil(n / batch_size)


class _EpochBatchSampler(Sampler):
    def __init__(self, n, batch_size, seed, epoch, drop_last):
        self.args = (n, batch_size, seed, epoch, drop_last)

    def __iter__(self) -> Iterator[list[tuple[int, int]]]:
        epoch = self.args[3]
        for b in epoch_batches(*self.args):
            yield [(epoch, int(i)) for i in b]

    def __len__(self) -> int:
        n, batch_size, _, _, drop_last = self.args
        return steps_per_epoch(n, batch_size, drop_last)


def augmented_loader(data: AugmentedImages, batch_size: int, epoch: int, drop_last: bool,
                     num_workers: int = 0, pin_memory: bool = False) -> DataLoader:
    sampler = _EpochBatchSampler(len(data), batch_size, data.seed, epoch, drop_last)
    return DataLoader(data, batch_sampler=sampler, num_workers=num_workers, persistent_workers=False,
                      pin_memory=pin_memory)
