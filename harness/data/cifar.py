"""CIFAR-10 and CIFAR-100 from the official python pickles, as torchvision's ``CIFAR10`` /
``CIFAR100`` read them (what iBOT's ``evaluation/eval_cls.py`` and DeiT's ``datasets.py`` train on):
the training split is ``data_batch_1..5`` (CIFAR-10) or ``train`` (CIFAR-100) in that order, the
test split ``test_batch`` / ``test``; each batch's ``data`` is (N, 3072) uint8 in channel-major
order, its labels ``labels`` (CIFAR-10) or ``fine_labels`` (CIFAR-100, the 100-way task); class
names from ``batches.meta`` ``label_names`` / ``meta`` ``fine_label_names``.

The pickles are opened with an unpickler that builds only the containers and numpy arrays these
files hold, so that a file that is not CIFAR's cannot run code when it is read."""
from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
from PIL import Image

from harness.config import fingerprint as _fingerprint
from harness.data.io import files_stamp
from harness.data.official_split import OfficialSplit
from harness.errors import DataError
from harness.registry import register_dataset

# The globals a CIFAR pickle needs: numpy's array reconstruction (numpy 1 and 2 module paths) and
# the bytes codec protocol-2 pickles written by Python 3 use.
_ALLOWED = {("numpy.core.multiarray", "_reconstruct"), ("numpy._core.multiarray", "_reconstruct"),
            ("numpy", "ndarray"), ("numpy", "dtype"), ("_codecs", "encode")}


class _ArrayUnpickler(pickle.Unpickler):
    def find_class(self, module, name):
        if (module, name) not in _ALLOWED:
            raise pickle.UnpicklingError(f"global {module}.{name} is not part of a CIFAR batch")
        return super().find_class(module, name)


def load_batch(path: Path, dataset: str) -> dict:
    """One CIFAR pickle as a dict (latin-1 strings, as torchvision opens the Python 2 files)."""
    try:
        with open(path, "rb") as f:
            entry = _ArrayUnpickler(f, encoding="latin1").load()
    except FileNotFoundError:
        raise DataError(f"{dataset}: {path} not found") from None
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, AttributeError, ImportError) as exc:
        raise DataError(f"{dataset}: {path} is not a CIFAR python pickle ({exc}); re-extract the "
                        f"official archive") from exc
    if not isinstance(entry, dict):
        raise DataError(f"{dataset}: {path} holds a {type(entry).__name__}, not a CIFAR batch dict")
    return entry


class _Cifar(OfficialSplit):
    """Images held in the batch pickles: ``image_paths`` repeat the batch file of each image (for the
    content stamp and the root check), ``load_image`` decodes row i of the stacked arrays."""

    FOLDER = ""
    TRAIN_FILES: tuple[str, ...] = ()
    TEST_FILES: tuple[str, ...] = ()
    META_FILE, NAMES_KEY, LABELS_KEY = "", "", ""

    @property
    def LAYOUT(self) -> str:  # noqa: N802 - the attribute OfficialSplit's messages read
        files = ", ".join(self.TRAIN_FILES + self.TEST_FILES + (self.META_FILE,))
        return f"<root>/{self.FOLDER}/{{{files}}} (the official python pickles, as extracted)"

    def read(self):
        base = self.root / self.FOLDER
        meta = load_batch(self.require(base / self.META_FILE), self.name)
        if self.NAMES_KEY not in meta:
            raise DataError(f"{self.name}: {base / self.META_FILE} has no {self.NAMES_KEY!r} "
                            f"(keys {sorted(meta)}); expected {self.LAYOUT}")
        classes = [str(c) for c in meta[self.NAMES_KEY]]
        arrays, labels, paths = [], [], []
        for fname in self.TRAIN_FILES if self.split == "train" else self.TEST_FILES:
            path = self.require(base / fname)
            entry = load_batch(path, self.name)
            data, batch_labels = self._check_batch(entry, path)
            arrays.append(data)
            labels += batch_labels
            paths += [path] * len(batch_labels)
        # (N, 3072) channel-major -> (N, 32, 32, 3), as torchvision reshapes it
        self.pixels = np.concatenate(arrays).reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1)
        self.stems = [f"{p.name}/{i}" for p, i in zip(paths, _positions(paths))]
        return classes, paths, labels

    def _check_batch(self, entry: dict, path: Path) -> tuple[np.ndarray, list[int]]:
        missing = [k for k in ("data", self.LABELS_KEY) if k not in entry]
        if missing:
            raise DataError(f"{self.name}: {path} has no {missing} (keys {sorted(entry)}); expected {self.LAYOUT}")
        data = np.asarray(entry["data"])
        labels = [int(t) for t in entry[self.LABELS_KEY]]
        if data.dtype != np.uint8 or data.ndim != 2 or data.shape[1] != 3072 or len(data) != len(labels):
            raise DataError(f"{self.name}: {path} holds data {data.dtype} {data.shape} for {len(labels)} labels; "
                            f"expected uint8 (N, 3072) with N labels")
        return data, labels

    def check_first_image(self) -> None:  # the pickles were read: every image is there
        return None

    def load_image(self, i: int) -> Image.Image:
        return Image.fromarray(np.ascontiguousarray(self.pixels[i]))

    def content_stamp(self) -> str:
        return files_stamp(sorted(set(self.image_paths)))

    def fingerprint(self) -> str:
        return _fingerprint({"dataset": self.name, "split": self.split, "classes": self.classes,
                             "files": sorted({p.name for p in self.image_paths}), "n": len(self.targets),
                             "labels": self.targets})


def _positions(paths: list[Path]) -> list[int]:
    """The index of each image within its batch file."""
    out, seen = [], {}
    for p in paths:
        out.append(seen.get(p, 0))
        seen[p] = out[-1] + 1
    return out


@register_dataset("cifar10")
class Cifar10(_Cifar):
    name = "cifar10"
    FOLDER = "cifar-10-batches-py"
    TRAIN_FILES = tuple(f"data_batch_{i}" for i in range(1, 6))
    TEST_FILES = ("test_batch",)
    META_FILE, NAMES_KEY, LABELS_KEY = "batches.meta", "label_names", "labels"


@register_dataset("cifar100")
class Cifar100(_Cifar):
    name = "cifar100"
    FOLDER = "cifar-100-python"
    TRAIN_FILES = ("train",)
    TEST_FILES = ("test",)
    META_FILE, NAMES_KEY, LABELS_KEY = "meta", "fine_label_names", "fine_labels"
