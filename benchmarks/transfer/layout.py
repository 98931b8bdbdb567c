"""What every linear-transfer reader serves (a LabelledImages with the data set's split plan), and
the checks that turn a wrong layout into one DataError naming the missing file."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from harness.config import fingerprint as _fingerprint
from harness.data.classification import LabelledImages
from harness.errors import DataError


class TransferImages(LabelledImages):
    """One split of a transfer data set. Class attributes state the official plan
    (SynCLR main_downstream_linear.py ``get_train_valid_loader`` and ``LINEAR_DATASETS``):

    - ``METRIC``: "top1", "mean_per_class" or "mAP";
    - ``VAL_SPLIT``: the data set's own validation split, or None (then 20% of ``BASE_SPLIT`` is
      held out for choosing C, and the final fit uses all of ``BASE_SPLIT``);
    - ``BASE_SPLIT``: the training split ("train", or "trainval" for Pets); ``TEST_SPLIT``.
    ``targets`` is a list of class indices, or for multi-label sets ``label_matrix`` (N, C) 0/1.
    """

    name = "?"
    METRIC = "top1"
    VAL_SPLIT: str | None = None
    BASE_SPLIT = "train"
    TEST_SPLIT = "test"
    SPLITS: tuple[str, ...] = ("train", "test")
    LAYOUT = ""  # the published layout in one line, for error messages
    thread_safe = True
    label_matrix: np.ndarray | None = None

    def __init__(self, root, split: str):
        self.root, self.split = Path(root), split
        if split not in self.SPLITS:
            raise DataError(f"{self.name} has no split {split!r}; its splits are {', '.join(self.SPLITS)}")
        if not self.root.is_dir():
            raise DataError(f"{self.name} data root {self.root} does not exist; expected {self.LAYOUT}")
        self.classes, self.image_paths, labels = self.read()
        if not self.image_paths:
            raise DataError(f"{self.name} split {split!r} under {self.root} lists no images; expected {self.LAYOUT}")
        if self.label_matrix is None:
            self.targets = [int(t) for t in labels]
        else:
            self.targets = list(range(len(self.image_paths)))  # unused for multi-label sets
        self.samples = list(zip(self.image_paths, self.targets))
        first = self.image_paths[0]
        if not first.is_file():
            raise DataError(f"{self.name} image {first} (split {split!r}) does not exist; expected {self.LAYOUT}")

    def read(self) -> tuple[list[str], list[Path], list[int]]:
        raise NotImplementedError

    def require(self, path: Path) -> Path:
        if not path.is_file():
            raise DataError(f"{self.name}: {path} not found; expected {self.LAYOUT}")
        return path

    def lines(self, path: Path) -> list[str]:
        return [ln for ln in self.require(path).read_text().splitlines() if ln.strip()]

    def fingerprint(self) -> str:
        labels = self.targets if self.label_matrix is None else self.label_matrix.astype(int).tolist()
        return _fingerprint({"dataset": self.name, "split": self.split, "classes": list(self.classes),
                             "files": [p.relative_to(self.root).as_posix() for p in self.image_paths],
                             "labels": labels})
