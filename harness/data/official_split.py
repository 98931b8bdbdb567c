"""What a reader of a data set's official annotation files serves: one split as a
:class:`~harness.data.classification.LabelledImages` (samples, targets, classes, image loading,
content stamp, fingerprint), so that a protocol consumes it as it consumes an ImageFolder. A
subclass states its splits and layout and implements ``read``; a wrong layout is one DataError that
names the missing file and the layout expected."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from harness.config import fingerprint as _fingerprint
from harness.data.classification import LabelledImages
from harness.errors import DataError


class OfficialSplit(LabelledImages):
    """One split of a data set read from its official files. Class attributes: ``name`` (the
    registry name), ``SPLITS`` (the split names ``read`` accepts), ``LAYOUT`` (the layout in one
    line, for error messages). A multi-label set's ``read`` sets ``label_matrix`` (N, C) 0/1 and
    returns no labels; its ``targets`` are then the image indices."""

    name = "?"
    SPLITS: tuple[str, ...] = ("train", "test")
    LAYOUT = ""
    thread_safe = True
    label_matrix: np.ndarray | None = None

    def __init__(self, root: str | Path, split: str):
        self.root, self.split = Path(root), split
        if split not in self.SPLITS:
            raise DataError(f"{self.name} has no split {split!r}; its splits are {', '.join(self.SPLITS)}")
        if not self.root.is_dir():
            raise DataError(f"{self.name} data root {self.root} does not exist; expected {self.LAYOUT}")
        self.classes, self.image_paths, labels = self.read()
        if not self.image_paths:
            raise DataError(f"{self.name} split {split!r} under {self.root} lists no images; expected {self.LAYOUT}")
        if self.label_matrix is not None:
            labels = range(len(self.image_paths))  # unused for a multi-label set
        self.targets = [int(t) for t in labels]
        bad = [] if self.label_matrix is not None else [t for t in self.targets if not 0 <= t < len(self.classes)]
        if bad:
            raise DataError(f"{self.name} split {split!r}: label {bad[0]} is out of range for its "
                            f"{len(self.classes)} classes; the annotation files under {self.root} do not "
                            f"belong together")
        self.samples = list(zip(self.image_paths, self.targets))
        if not hasattr(self, "stems"):  # root-relative names without extension, as ImageFolderDataset's
            self.stems = [p.relative_to(self.root).with_suffix("").as_posix() for p in self.image_paths]
        self.check_first_image()

    def check_first_image(self) -> None:
        first = self.image_paths[0]
        if not first.is_file():
            raise DataError(f"{self.name} image {first} (split {self.split!r}) does not exist; expected {self.LAYOUT}")

    def read(self) -> tuple[list[str], list[Path], list[int]]:
        raise NotImplementedError

    def require(self, path: Path) -> Path:
        if not path.is_file():
            raise DataError(f"{self.name}: {path} not found; expected {self.LAYOUT}")
        return path

    def lines(self, path: Path) -> list[str]:
        """The non-blank lines of a required text file."""
        return [ln for ln in self.require(path).read_text().splitlines() if ln.strip()]

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(root={str(self.root)!r}, split={self.split!r}, n={len(self)}, "
                f"num_classes={self.num_classes})")

    def fingerprint(self) -> str:
        """Hash of the root-relative file list, the labels, the classes and the split name."""
        labels = self.targets if self.label_matrix is None else self.label_matrix.astype(int).tolist()
        return _fingerprint({"dataset": self.name, "split": self.split, "classes": list(self.classes),
                             "files": [p.relative_to(self.root).as_posix() for p in self.image_paths],
                             "labels": labels})
