"""Named training subsets: the 1% and 10% ImageNet label fractions of SimCLRv2 (iBOT Table 12 runs
its frozen-feature protocols on them: evaluation/README.md, "Semi-Supervised Classification"), or
any list of training file names. A protocol takes one with :class:`TrainSubsetSetting` and a
``train_subset`` setting (the k-NN, linear and logistic-regression protocols do).

A protocol's training split is restricted to the images a subset file lists (SimCLRv2's format: one
training file name per line, e.g. ``n01440764_10026.JPEG``). ``train_subset`` names the file: a
known name (``imagenet_1pct``, ``imagenet_10pct``) looked up under ``$SSL_BENCH_HOME/subsets/`` and
``configs/subsets/``, or a path. The subset's content hash (sorted names, order-free) and size go
into the protocol's fingerprint; the file's own sha256 into the record.

The SimCLRv2 lists are not part of ssl-bench's source (they are google-research/simclr's files):
``python -m scripts.get_subsets`` copies them from a checkout of that repository, or downloads them,
into ``$SSL_BENCH_HOME/subsets/``. A known name is checked against its source file's sha256 and
size, so that an edited or truncated list is refused instead of silently measuring another subset;
a known name whose file is absent is one DataError saying how to get it.
"""
from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from harness.config import CONFIG_ROOT
from harness.errors import DataError

SIMCLR_REPOSITORY = "https://github.com/google-research/simclr"
SIMCLR_COMMIT = "383d4143fd8cf7879ae10f1046a9baeb753ff438"  # the newest commit touching neither list


@dataclass(frozen=True)
class KnownSubset:
    """A published list: its file at its source, the file's sha256 and its number of names."""
    source_path: str
    sha256: str
    images: int

    @property
    def url(self) -> str:
        raw = SIMCLR_REPOSITORY.replace("github.com", "raw.githubusercontent.com")
        return f"{raw}/{SIMCLR_COMMIT}/{self.source_path}"


KNOWN = {
    "imagenet_1pct": KnownSubset("imagenet_subsets/1percent.txt",
                                 "71e82a48ba78252683ae334c4d019ebd5c6e855b9599c1389fbe83eb9549cf17", 12811),
    "imagenet_10pct": KnownSubset("imagenet_subsets/10percent.txt",
                                  "6d09de11e7bdaf5b1f3b1f249b6183695f97310cdd20f0c03e7235b6b9392091", 128116),
}


@dataclass(frozen=True)
class TrainSubset:
    name: str
    path: Path
    names: frozenset[str]
    file_sha256: str
    content_sha256: str  # of the sorted names: what the fingerprint holds

    def fingerprint_items(self) -> dict:
        return {"train_subset": self.name, "train_subset_sha256": self.content_sha256,
                "train_subset_images": len(self.names)}


def _candidates(name: str) -> list[Path]:
    home = Path(os.environ.get("SSL_BENCH_HOME", Path.home() / ".cache" / "ssl-bench"))
    return [home / "subsets" / f"{name}.txt", CONFIG_ROOT / "subsets" / f"{name}.txt"]


def resolve(spec: str) -> TrainSubset:
    """The subset a ``train_subset`` setting names; a DataError saying what to do otherwise."""
    if spec in KNOWN:
        found = [p for p in _candidates(spec) if p.is_file()]
        if not found:
            raise DataError(f"train_subset {spec!r}: its list (SimCLRv2's {KNOWN[spec].source_path}) is not installed; "
                            f"run `python -m scripts.get_subsets` (or --simclr CHECKOUT) to put it in "
                            f"{_candidates(spec)[0].parent}")
        path, name = found[0], spec
        check_known(spec, path.read_bytes(), path)
    else:
        path, name = Path(spec).expanduser(), Path(spec).stem
        if not path.is_file():
            raise DataError(f"train_subset {spec!r}: no such file, and not a known subset name "
                            f"({', '.join(KNOWN)})")
    raw = path.read_bytes()
    names = [line.strip() for line in raw.decode("utf-8", errors="replace").splitlines() if line.strip()]
    if not names:
        raise DataError(f"train_subset {path}: empty; expected one training image file name per line")
    if len(set(names)) != len(names):
        raise DataError(f"train_subset {path}: names {len(names) - len(set(names))} image(s) twice")
    content = hashlib.sha256("\n".join(sorted(names)).encode()).hexdigest()
    return TrainSubset(name, path, frozenset(names), hashlib.sha256(raw).hexdigest(), content)


def check_known(name: str, raw: bytes, path: Path | str) -> None:
    """A known subset's file must be its source's, byte for byte."""
    known = KNOWN[name]
    digest = hashlib.sha256(raw).hexdigest()
    if digest != known.sha256:
        lines = len(raw.splitlines())
        raise DataError(f"train_subset {name!r}: {path} is not SimCLRv2's {known.source_path} "
                        f"(sha256 {digest[:12]}..., {lines} lines; expected {known.sha256[:12]}..., "
                        f"{known.images}); fetch it again with "
                        f"`python -m scripts.get_subsets`")


class SubsetSource:
    """The images of a split reader whose file names the subset lists (ImageSource contract)."""

    def __init__(self, reader, subset: TrainSubset):
        paths = getattr(reader, "image_paths", None)
        if paths is None:
            raise DataError(f"train_subset: the {type(reader).__name__} reader lists no image files to filter")
        self.reader, self.subset = reader, subset
        self.indices = [i for i, p in enumerate(paths) if Path(p).name in subset.names]
        missing = len(subset.names) - len(self.indices)
        if missing:
            have = {Path(p).name for p in paths}
            example = next(n for n in sorted(subset.names) if n not in have)
            raise DataError(f"train_subset {subset.path}: {missing} listed image(s) are not in the training split "
                            f"(e.g. {example}); the list must name files of this split")
        self.classes = reader.classes
        self.targets = [reader.targets[i] for i in self.indices]
        self.thread_safe = getattr(reader, "thread_safe", True)

    def __len__(self) -> int:
        return len(self.indices)

    def load_image(self, i: int):
        return self.reader.load_image(self.indices[i])

    def fingerprint(self) -> str:
        return hashlib.sha256(f"{self.reader.fingerprint()}|subset={self.subset.content_sha256}".encode()).hexdigest()


class TrainSubsetSetting:
    """For a protocol whose configuration has ``train_subset`` (a name or a path; empty: the whole
    training split): the subset resolved once, its content in the fingerprint, the training split
    restricted to it, and what a record says about it. List ``train_subset`` in the protocol's
    ``NOT_IN_FINGERPRINT``: the subset's name, content hash and size stand for it."""

    def train_subset(self) -> TrainSubset | None:
        """The named training subset, or None; a missing or wrong list is a DataError."""
        spec = self.cfg.train_subset
        if not spec:
            return None
        if self.__dict__.get("_train_subset_spec") != spec:
            self.__dict__["_train_subset"] = resolve(spec)
            self.__dict__["_train_subset_spec"] = spec
        return self.__dict__["_train_subset"]

    def fingerprint(self, extra: dict | None = None) -> str:
        subset = self.train_subset()
        return super().fingerprint({**(extra or {}), **(subset.fingerprint_items() if subset else {})})

    def restrict_train(self, splits):
        """``splits`` with its training reader and labels restricted to the subset (as they are
        without one)."""
        subset = self.train_subset()
        if subset is not None:
            splits.train = SubsetSource(splits.train, subset)
            splits.train_labels = np.asarray(splits.train.targets, dtype=np.int64)
        return splits

    def train_subset_params(self) -> dict:
        """A record's ``params`` about the subset: its name and the list file's sha256."""
        subset = self.train_subset()
        return {"train_subset": subset.name, "train_subset_file_sha256": subset.file_sha256} if subset else {}
