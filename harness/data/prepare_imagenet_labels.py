"""ImageNet's extra label files, put beside the images ``data prepare imagenet`` writes when the
download holds them (both are optional):

- ReaL (google-research/reassessed-imagenet's ``real.json``): one entry per val image (entry i is
  ``ILSVRC2012_val_{i+1:08d}``), each a list of class indices (positions in the sorted wnids, the
  ImageFolder order; empty where the raters kept no label). Checked against the devkit (one entry per
  val image, indices below the number of classes) and copied to ``<root>/real.json``, where the
  robustness protocol's ``real_labels`` reads it.
- SimCLRv2's label fractions (google-research/simclr ``imagenet_subsets/1percent.txt`` and
  ``10percent.txt``: one training file name a line). Checked against the sha256 that
  harness.data.subsets records and copied to ``<root>/subsets/imagenet_1pct.txt`` /
  ``imagenet_10pct.txt``; ``train_subset=<root>/subsets/imagenet_1pct.txt`` reads it with the same
  name, content hash and file sha256 as the list ``scripts.get_subsets`` installs.

``check(root)`` (part of ``data check imagenet``) reports a real.json whose length is not the number
of val images, and every listed training image that is absent from ``train/``.
"""
from __future__ import annotations

import os
from pathlib import Path

from harness.data.imagenet_real import read_real
from harness.data.prepare import Steps
from harness.errors import DataError

REAL = "real.json"
SUBSETS = {"1percent.txt": "imagenet_1pct", "10percent.txt": "imagenet_10pct"}  # SimCLRv2 file -> known name
SHOWN = 3


def real_problems(labels: list[list[int]], val_images: int, classes: int) -> list[str]:
    """What does not fit: the entry count against the val images, indices out of range."""
    problems = []
    if len(labels) != val_images:
        problems.append(f"real.json has {len(labels):,} entries for {val_images:,} val images (one per image)")
    bad = sorted({k for x in labels for k in x if not 0 <= k < classes})
    if bad:
        problems.append(f"real.json names class indices {bad[:SHOWN]} outside 0..{classes - 1}")
    return problems


def read_list(path: Path) -> list[str]:
    return [line.strip() for line in path.read_text(errors="replace").splitlines() if line.strip()]


def train_names(root: Path) -> set[str]:
    names = set()
    for folder in os.scandir(root / "train"):
        if folder.is_dir():
            names.update(entry.name for entry in os.scandir(folder.path))
    return names


def _prepare_real(steps: Steps, source: Path, wnids: list[str]) -> None:
    def real(staging: Path) -> dict:
        labels = read_real(source)
        problems = real_problems(labels, len(wnids), len(set(wnids)))
        if problems:
            raise DataError(f"{source} does not belong to this devkit: {'; '.join(problems)}")
        (staging / REAL).write_bytes(source.read_bytes())
        return {"ReaL entries": len(labels), "without label": sum(1 for x in labels if not x)}

    steps.run("real", real)


def _prepare_subsets(steps: Steps, found: dict[str, Path]) -> None:
    from harness.data.subsets import check_known

    def subsets(staging: Path) -> dict:
        facts = {}
        for name, source in found.items():
            raw = source.read_bytes()
            check_known(name, raw, source)  # an edited or truncated list is refused
            (staging / "subsets").mkdir(exist_ok=True)
            (staging / "subsets" / f"{name}.txt").write_bytes(raw)
            facts[name] = len(read_list(source))
        return facts

    steps.run("subsets", subsets)


def prepare(steps: Steps, wnids: list[str]) -> None:
    """The optional ReaL and subset steps; ``wnids``: the devkit's wnid of each val image (ReaL is
    checked against it)."""
    if (steps.download / REAL).is_file():
        _prepare_real(steps, steps.download / REAL, wnids)
    else:
        steps.log(f"  real: {REAL} not in the download (ReaL labels: google-research/reassessed-imagenet)")
    found = {known: steps.download / f for f, known in SUBSETS.items() if (steps.download / f).is_file()}
    if found:
        _prepare_subsets(steps, found)
    else:
        steps.log(f"  subsets: no {' / '.join(SUBSETS)} in the download (google-research/simclr imagenet_subsets/)")


def _real_check(root: Path) -> tuple[list[str], list[str]]:
    try:
        labels = read_real(root / REAL)
    except DataError as exc:
        return [], [str(exc)]
    val = sum(1 for _ in (root / "val").glob("*/*")) if (root / "val").is_dir() else 0
    classes = sum(1 for p in (root / "val").iterdir() if p.is_dir()) if val else 1000
    fact = f"ReaL labels: {len(labels):,} entries, {sum(1 for x in labels if not x):,} without label"
    return [fact], real_problems(labels, val, classes)


def check(root: Path) -> tuple[list[str], list[str]]:
    """(facts, problems) of real.json and the subset lists in a root."""
    facts, problems = _real_check(root) if (root / REAL).is_file() else ([], [])
    have: set[str] | None = None
    for listing in sorted((root / "subsets").glob("*.txt")) if (root / "subsets").is_dir() else []:
        names = read_list(listing)
        if not (root / "train").is_dir():
            facts.append(f"subset {listing.stem}: {len(names):,} images, not checked (no train/)")
            continue
        have = train_names(root) if have is None else have
        absent = sorted(set(names) - have)
        facts.append(f"subset {listing.stem}: {len(names) - len(absent):,} of {len(names):,} listed images in train/")
        if absent:
            problems.append(f"subset {listing.stem}: {len(absent):,} listed images absent from train/, e.g. "
                            f"{', '.join(absent[:SHOWN])}")
    return facts, problems
