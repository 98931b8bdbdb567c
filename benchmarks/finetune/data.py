"""Images for fine-tuning: the official transforms, seeded per sample, and the epoch's batches.

Transforms (iBOT's ``run_class_finetuning.build_transform``, bytedance/ibot at da316d8): training
is timm's ``create_transform`` (RandomResizedCrop, flip, RandAugment ``aa``, colour jitter when no
auto-augment, random erasing ``reprob`` / ``remode`` / ``recount``), with ``RandomCrop(padding=4)``
in place of the resized crop at 32 px and below; evaluation is Resize(input_size / crop_pct,
``eval_interpolation``) + CenterCrop, ``crop_pct`` 224/256 below 384 px, else 1.0. Normalisation: Inception's
0.5 / 0.5 unless ``imagenet_default_mean_and_std``, or the named ``normalization``.

Determinism (a difference from the official loader, which draws from each worker's own RNG): each
sample's augmentation is seeded by (seed, epoch, index, copy), and the epoch's order by (seed, epoch)
(under repeated augmentation by the epoch alone, as DeiT's RASampler: benchmarks.finetune.sampler), so
a run resumed mid-epoch and a run with another number of loader workers see the same images.
"""
from __future__ import annotations

import random

import numpy as np
import torch
from torch.utils.data import Dataset

from harness.data.io import load_rgb

IMAGENET_DEFAULT = ((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))
INCEPTION = ((0.5, 0.5, 0.5), (0.5, 0.5, 0.5))
# OpenAI CLIP's, as SynCLR's util/datasets.py normalises (google-research/syn-rep-learn @ 45f451b)
CLIP = ((0.48145466, 0.4578275, 0.40821073), (0.26862954, 0.26130258, 0.27577711))
MEAN_STD = {"imagenet": IMAGENET_DEFAULT, "inception": INCEPTION, "clip": CLIP}


def mean_std(cfg) -> tuple[tuple[float, ...], tuple[float, ...]]:
    if cfg.normalization is not None:
        return MEAN_STD[cfg.normalization]
    return IMAGENET_DEFAULT if cfg.imagenet_default_mean_and_std else INCEPTION


def train_transform(cfg):
    from timm.data import create_transform
    from torchvision import transforms

    mean, std = mean_std(cfg)
    transform = create_transform(input_size=cfg.input_size, is_training=True, color_jitter=cfg.color_jitter,
                                 auto_augment=cfg.aa, interpolation=cfg.train_interpolation, re_prob=cfg.reprob,
                                 re_mode=cfg.remode, re_count=cfg.recount, mean=mean, std=std)
    if cfg.input_size <= 32:
        transform.transforms[0] = transforms.RandomCrop(cfg.input_size, padding=4)
    posterize_to_zero_bits(transform)
    return transform


def _posterize(img, bits_to_keep, **_):
    """timm's ``posterize`` as it ran with the Pillow of the official code: 0 bits kept is a black
    image (Pillow >= 11 refuses 0 bits, which RandAugment's ``inc1`` reaches at high magnitude)."""
    from PIL import Image

    if bits_to_keep >= 8:
        return img
    mask = ~(2 ** (8 - max(int(bits_to_keep), 0)) - 1) & 0xFF
    return Image.eval(img, lambda i: i & mask)


def posterize_to_zero_bits(transform) -> None:
    """Give the posterize ops of a timm RandAugment in ``transform`` :func:`_posterize`."""
    from timm.data import auto_augment

    for step in getattr(transform, "transforms", []):
        for op in getattr(step, "ops", []):
            if getattr(op, "aug_fn", None) is auto_augment.posterize:
                op.aug_fn = _posterize


def eval_transform(cfg):
    from torchvision import transforms

    mean, std = mean_std(cfg)
    steps = []
    if cfg.input_size > 32:
        crop_pct = cfg.crop_pct if cfg.crop_pct is not None else (224 / 256 if cfg.input_size < 384 else 1.0)
        mode = transforms.InterpolationMode(cfg.eval_interpolation)
        steps += [transforms.Resize(int(cfg.input_size / crop_pct), interpolation=mode),
                  transforms.CenterCrop(cfg.input_size)]
    steps += [transforms.ToTensor(), transforms.Normalize(mean, std)]
    return transforms.Compose(steps)


def sample_seed(seed: int, epoch: int, index: int, repeat: int = 0) -> int:
    """The augmentation seed of one sample (``repeat``: which copy, under repeated augmentation)."""
    return (seed * 1_000_003 + epoch * 10_007 + index + repeat * 1_000_000_007) % (2 ** 31)


class ImageFiles:
    """Image files as a reader serves them (``load_image(i)``, ``len``)."""

    def __init__(self, paths):
        self.paths = list(paths)

    def __len__(self) -> int:
        return len(self.paths)

    def load_image(self, i: int):
        return load_rgb(self.paths[i])


class TransformedImages(Dataset):
    """(image tensor, label) of a reader's samples, decoded through the reader's ``load_image(i)``
    (files, or arrays as CIFAR's pickles hold them); with ``seeded``, every random choice of the
    transform (python's ``random``, numpy's and torch's global generators) is drawn from a seed
    of (seed, epoch, index) and the callers' generators are left as they were."""

    def __init__(self, images, labels, transform, seed: int = 0, seeded: bool = True):
        self.images, self.labels = images, np.asarray(labels, dtype=np.int64)
        if len(self.images) != len(self.labels):
            raise ValueError(f"{len(self.images)} images for {len(self.labels)} labels")
        self.transform, self.seed, self.seeded = transform, seed, seeded
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, key):
        """``key``: an index, or (index, repeat) from a repeated-augmentation sampler."""
        i, repeat = key if isinstance(key, tuple) else (key, 0)
        image = self.images.load_image(i)
        if not self.seeded:
            return self.transform(image), int(self.labels[i])
        s = sample_seed(self.seed, self.epoch, i, repeat)
        py_state, np_state = random.getstate(), np.random.get_state()
        try:
            with torch.random.fork_rng(devices=[]):
                random.seed(s)
                np.random.seed(s)
                torch.manual_seed(s)
                x = self.transform(image)
        finally:
            random.setstate(py_state)
            np.random.set_state(np_state)
        return x, int(self.labels[i])


def epoch_micro_batches(n_images: int, batch_size: int, update_freq: int, seed: int, epoch: int) -> list[list[int]]:
    """The epoch's micro-batches in order: a permutation seeded by (seed, epoch), cut into
    ``n_images // batch_size`` optimisation steps (the official ``len(dataset) // total_batch``;
    the rest is dropped), each cut into ``update_freq`` micro-batches."""
    g = torch.Generator().manual_seed(seed * 100_003 + epoch)
    order = torch.randperm(n_images, generator=g).tolist()
    micro = batch_size // update_freq
    steps = n_images // batch_size
    return [order[s * batch_size + m * micro: s * batch_size + (m + 1) * micro]
            for s in range(steps) for m in range(update_freq)]


def rank_share(batch: list[int], rank: int, world: int) -> list[int]:
    """This process's contiguous share of a micro-batch."""
    per = len(batch) // world
    return batch[rank * per:(rank + 1) * per]

