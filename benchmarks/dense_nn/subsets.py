"""Training-set subsampling of the dense NN protocol: fractions 1/1, 1/8, 1/64, 1/128,
one list per (fraction, seed), nested (1/128 inside 1/64 inside 1/8 for one seed) and
drawn from the training split only (so disjoint from validation).

Either read the published open-hummingbird-eval lists
(``file_sets/{voc,ade20k}/1_div_{8,64,128}/{trainaug,training}_{div}_{seed}.txt``, one
stem per line) or generate lists of the same kind: one seeded permutation of the sorted
training stems per seed, each fraction a prefix of it (``floor(N / div)`` stems; a fraction
with fewer than one image is refused). The published lists are nested too but their sizes do not follow one formula
(VOC 1320 / 160 / 80 of 10,582; ADE20K 2550 / 300 / 150 of 20,210), so generated lists
cannot reproduce them; point ``subset_dir`` at the published ones to compare with
numbers computed on them.
"""
from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

import numpy as np

from harness.errors import ConfigError, DataError


def parse_fraction(text: str | int) -> Fraction:
    """'1/8' -> Fraction(1, 8); only '1/d' (d a positive integer) or '1' is allowed."""
    m = re.fullmatch(r"\s*1\s*(?:/\s*(\d+)\s*)?", str(text))
    if not m or (m.group(1) is not None and int(m.group(1)) < 1):
        raise ConfigError(f"fraction {text!r} is not of the form '1/d' with d a positive integer "
                          f"(e.g. '1/8', '1/128', '1/1')")
    return Fraction(1, int(m.group(1) or 1))


def fraction_label(f: Fraction) -> str:
    return f"1/{f.denominator}"


def list_sha256(stems: list[str]) -> str:
    """Hash of a subset list, order-free (the protocol's result does not depend on order)."""
    return hashlib.sha256("".join(s + "\n" for s in sorted(stems)).encode()).hexdigest()


@dataclass
class Subset:
    fraction: Fraction
    seed: int | None
    stems: list[str]
    source: str  # "all", "generated" or the path of the published list

    @property
    def label(self) -> str:
        return fraction_label(self.fraction)

    @property
    def sha256(self) -> str:
        return list_sha256(self.stems)


def generate_subsets(stems: list[str], divisors: list[int], seed: int) -> dict[int, list[str]]:
    """Nested subsets for one seed: the prefixes of one seeded permutation of the sorted stems."""
    pool = sorted(stems)
    order = np.random.default_rng(seed).permutation(len(pool))
    out = {}
    for d in divisors:
        check_fraction_size(len(pool), d)
        out[d] = [pool[i] for i in order[:len(pool) // d]]
    return out


def check_fraction_size(n_train: int, divisor: int) -> None:
    """A generated 1/d list holds floor(N / d) images; below one image there is no subset to
    draw (open-hummingbird-eval's ``dataset*fraction`` gives an empty bank there), and rounding
    up to one image would report several fractions as separate columns of one measurement."""
    if n_train // divisor < 1:
        raise ConfigError(
            f"fraction 1/{divisor} of {n_train} training image(s) is less than one image "
            f"(floor({n_train} / {divisor}) = 0); drop it from fractions (e.g. --set "
            f"'fractions=[1/1, 1/8]'), use fractions 1/d with d <= {max(n_train, 1)}, or a larger "
            f"training split")


def read_stem_list(path: Path) -> list[str]:
    try:
        lines = Path(path).read_text().splitlines()
    except OSError as exc:
        raise DataError(f"cannot read subset list {path}: {exc}") from exc
    stems = [ln.strip() for ln in lines if ln.strip()]
    if not stems:
        raise DataError(f"subset list {path} is empty; expected one image stem per line")
    dupes = len(stems) - len(set(stems))
    if dupes:
        raise DataError(f"subset list {path} names {dupes} stem(s) twice; expected distinct stems")
    return stems


def find_published_list(subset_dir: Path, dataset: str, divisor: int, seed: int) -> Path:
    """``subset_dir`` may be ``file_sets/``, ``file_sets/<dataset>/`` or a flat folder."""
    subset_dir = Path(subset_dir)
    folders = [subset_dir / dataset / f"1_div_{divisor}", subset_dir / f"1_div_{divisor}", subset_dir]
    for folder in folders:
        if folder.is_dir():
            hits = sorted(folder.glob(f"*_{divisor}_{seed}.txt"))
            if len(hits) == 1:
                return hits[0]
            if len(hits) > 1:
                raise DataError(f"{folder} holds several lists for 1/{divisor} seed {seed}: "
                                f"{', '.join(h.name for h in hits)}; keep one")
    raise DataError(
        f"no subset list for fraction 1/{divisor} and seed {seed} under {subset_dir} (looked for "
        f"'*_{divisor}_{seed}.txt' in {', '.join(str(f) for f in folders)}); point subset_dir at "
        f"open-hummingbird-eval's file_sets/ folder, or leave it unset to generate lists")


def plan_subsets(train_stems: list[str], val_stems: list[str], fractions: list[str], seeds: list[int],
                 *, dataset: str, subset_dir: str | Path | None = None) -> list[Subset]:
    """One Subset per (fraction, seed); 1/1 is a single run with the first seed.

    Raises DataError if a list names a stem missing from the training split or present in
    the validation split.
    """
    if not seeds:
        raise ConfigError("seeds must hold at least one seed")
    fracs = sorted({parse_fraction(f) for f in fractions}, reverse=True)
    if not fracs:
        raise ConfigError("fractions must hold at least one fraction such as '1/8'")
    train_set, val_set = set(train_stems), set(val_stems)
    shared = train_set & val_set
    if shared:
        raise DataError(f"{len(shared)} image(s) are in both the training and the validation split "
                        f"(e.g. {sorted(shared)[0]!r}); the splits must be disjoint")
    divisors = [f.denominator for f in fracs if f.denominator > 1]
    if subset_dir is None:
        for d in divisors:  # before any run, so that nothing is recorded for the other fractions
            check_fraction_size(len(train_stems), d)
    out: list[Subset] = []
    if Fraction(1, 1) in fracs:
        out.append(Subset(Fraction(1, 1), seeds[0], sorted(train_stems), "all"))
    for seed in seeds:
        if subset_dir is None:
            lists = generate_subsets(train_stems, divisors, seed)
            for d in divisors:
                out.append(Subset(Fraction(1, d), seed, lists[d], "generated"))
            continue
        for d in divisors:
            path = find_published_list(Path(subset_dir), dataset, d, seed)
            stems = read_stem_list(path)
            missing = [s for s in stems if s not in train_set]
            if missing:
                raise DataError(
                    f"subset list {path} names {len(missing)} image(s) that are not in the training "
                    f"split (e.g. {missing[0]!r}); the list does not belong to this dataset/split, or "
                    f"the dataset on disk is incomplete")
            out.append(Subset(Fraction(1, d), seed, stems, str(path)))
    return out


def check_nested(subsets: list[Subset]) -> list[str]:
    """Warnings for lists of one seed that are not nested (published lists are)."""
    warnings = []
    by_seed: dict[int | None, list[Subset]] = {}
    for s in subsets:
        if s.fraction != 1:
            by_seed.setdefault(s.seed, []).append(s)
    for seed, group in by_seed.items():
        group = sorted(group, key=lambda s: s.fraction)
        for small, big in zip(group, group[1:]):
            if not set(small.stems) <= set(big.stems):
                warnings.append(f"seed {seed}: the {small.label} list is not inside the {big.label} list")
    return warnings


def write_subset_list(directory: Path, subset: Subset, dataset: str, split: str) -> Path:
    """Write a list beside the results (named like the published ones, plus its hash)."""
    from harness.io_utils import atomic_write_text

    name = f"{split}_{subset.fraction.denominator}_{subset.seed}_{subset.sha256[:12]}.txt"
    path = Path(directory) / dataset / f"1_div_{subset.fraction.denominator}" / name
    if not path.exists():
        atomic_write_text(path, "".join(s + "\n" for s in subset.stems))
    return path
