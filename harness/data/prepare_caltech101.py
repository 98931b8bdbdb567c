"""Caltech-101 from its official ``caltech-101.zip`` (data.caltech.edu, wrapping
``101_ObjectCategories.tar.gz``; the bare ``101_ObjectCategories.tar.gz`` is taken as well) to the
layout the ``caltech101`` reader reads: ``<root>/caltech101/101_ObjectCategories/<class>/<file>``
and SynCLR's ``<root>/train.txt`` / ``test.txt`` (``<class>/<file> <label>``), drawn as its
downstreams/caltech101.py ``create_caltech101_splits`` draws them: ImageFolder order over the 102
folders (``BACKGROUND_Google`` kept: its removal is commented out there), the legacy NumPy stream of
seed 0, 30 draws per class with replacement (sorted, so train.txt may repeat an image), and test =
every image never drawn. (Its test.txt follows a Python set's iteration order; here ascending
index order, the same lines.) Split sizes depend on the draw, so the catalogue records none."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from harness.data import archives
from harness.data.folder_splits import folder_classes
from harness.data.prepare import Steps
from harness.errors import DataError

WRAPPER, ARCHIVE = "caltech-101.zip", "101_ObjectCategories.tar.gz"
TRAIN_PER_CLASS, SEED = 30, 0


def draw(labels: list[int], classes: int, per_class: int = TRAIN_PER_CLASS, seed: int = SEED) -> tuple[list, list]:
    """(train indices, test indices) of ``create_caltech101_splits`` over images labelled ``labels``."""
    rng = np.random.RandomState(seed)  # the stream np.random.seed(seed) gives the module-level calls
    members: dict[int, list[int]] = {k: [] for k in range(classes)}
    for i, label in enumerate(labels):
        members[label].append(i)
    train = [int(i) for k in members for i in np.sort(rng.choice(members[k], per_class))]
    drawn = set(train)
    return train, [i for i in range(len(labels)) if i not in drawn]


def _archive(steps: Steps, staging: Path) -> Path:
    if (steps.download / WRAPPER).is_file():
        return archives.zip_member(steps.download / WRAPPER, ARCHIVE, staging / ".zip")
    if (steps.download / ARCHIVE).is_file():
        return steps.download / ARCHIVE
    raise DataError(f"{steps.download} lacks {WRAPPER} (or the {ARCHIVE} inside it): the official download")


def prepare(steps: Steps) -> None:
    def convert(staging: Path) -> dict:
        images = archives.extract(_archive(steps, staging), staging / "caltech101")
        folder = staging / "caltech101" / "101_ObjectCategories"
        if not folder.is_dir():
            raise DataError(f"{ARCHIVE} has no 101_ObjectCategories/ folder: not the official archive")
        classes, paths, labels = folder_classes(folder)
        names = [p.relative_to(folder).as_posix() for p in paths]
        train, test = draw(labels, len(classes))
        for split, idx in (("train", train), ("test", test)):
            (staging / f"{split}.txt").write_text("".join(f"{names[i]} {labels[i]}\n" for i in idx))
        return {"images": images, "classes": len(classes), "train": len(train), "test": len(test)}

    steps.run("caltech101", convert)
