"""The official split plan (SynCLR main_downstream_linear.py ``get_train_valid_loader``): C is chosen
on the data set's own validation split where it has one (Aircraft, DTD, Flowers, VOC2007: "val";
Country211: "valid") and the final fit uses train + val; otherwise ``valid_size`` (0.2) of the
training split is held out: ``np.random.seed(seed); np.random.shuffle(indices)`` over range(n), the
first floor(0.2 n) indices are val and the rest train, and the final fit uses the whole split.

``PLANS``: each data set's plan and published metric (``LINEAR_DATASETS``), by the reader key the
protocol reads it with (the readers: harness/data)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


def carve_validation(n: int, valid_size: float = 0.2, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(train indices, val indices) of a split of n images, as the official loader draws them."""
    indices = list(range(n))
    np.random.RandomState(seed).shuffle(indices)  # the legacy global stream np.random.seed(seed) gives
    split = int(np.floor(valid_size * n))
    return np.asarray(indices[split:], dtype=np.int64), np.asarray(indices[:split], dtype=np.int64)


@dataclass(frozen=True)
class Plan:
    """``metric``: "top1", "mean_per_class" or "mAP"; ``val_split``: the data set's own validation
    split, or None (then ``valid_size`` of ``base_split`` is held out for choosing C, and the final
    fit uses all of ``base_split``); ``base_split``: the training split; ``test_split``."""

    metric: str = "top1"
    val_split: str | None = None
    base_split: str = "train"
    test_split: str = "test"


PLANS = {
    "dtd": Plan(val_split="val"), "pets": Plan("mean_per_class", base_split="trainval"),
    "flowers": Plan("mean_per_class", val_split="val"), "aircraft": Plan("mean_per_class", val_split="val"),
    "caltech101": Plan("mean_per_class"), "voc2007": Plan("mAP", val_split="val"), "food": Plan(),
    "sun397": Plan(), "cars": Plan(), "eurosat": Plan(), "resisc45": Plan(), "kitti_distance": Plan(),
    "country211": Plan(val_split="valid"), "gtsrb": Plan(), "mnist": Plan(),
}


@dataclass
class Arrays:
    """Features and labels of the four sets the recipe uses."""
    train: tuple[np.ndarray, np.ndarray]
    val: tuple[np.ndarray, np.ndarray]
    trainval: tuple[np.ndarray, np.ndarray]
    test: tuple[np.ndarray, np.ndarray]
    val_source: str


def own_validation(base, val, test, val_split: str) -> Arrays:
    """base / val / test: (features, labels) of the data set's own splits."""
    trainval = (np.concatenate([base[0], val[0]]), np.concatenate([base[1], val[1]]))
    return Arrays(base, val, trainval, test, f"the data set's own {val_split!r} split")


def carved_validation(base, test, base_split: str, valid_size: float, seed: int) -> Arrays:
    tr, va = carve_validation(len(base[0]), valid_size, seed)
    return Arrays((base[0][tr], base[1][tr]), (base[0][va], base[1][va]), base, test,
                  f"{valid_size:g} of {base_split!r} held out (seed {seed})")
