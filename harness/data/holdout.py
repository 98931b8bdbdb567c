"""A selection split carved from the training split, for choosing a swept setting honestly.

The papers' linear probes (DINO, iBOT) and logistic regression report the best epoch and learning
rate, or the best lambda, measured on the evaluation split itself. A protocol with a
``selection_holdout`` setting (a fraction, 0 = off) and a ``selection_seed`` reports beside that the
number chosen on a held-out part of the training split: the same fraction of every class (at least
one image of a class with two or more, never all of them), drawn by ``selection_seed``. The fraction
and the seed enter the fingerprint when the holdout is on; off, the request is what it was.
"""
from __future__ import annotations

import dataclasses
import hashlib

import numpy as np

from harness.errors import ConfigError


def carve(labels: np.ndarray, fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(kept, held-out) sorted indices into ``labels``: ``round(fraction * n)`` images of every class
    of n images held out (at least 1 when n >= 2, at most n - 1), each class drawn by
    Generator([seed, class])."""
    if not 0.0 < fraction < 1.0:
        raise ConfigError(f"selection_holdout must be in (0, 1), found {fraction}")
    labels = np.asarray(labels)
    held = []
    for c in np.unique(labels):
        members = np.flatnonzero(labels == c)
        n = len(members)
        take = min(max(int(round(fraction * n)), 1), n - 1) if n >= 2 else 0
        order = np.random.default_rng([seed, int(c)]).permutation(n)
        held.append(members[order[:take]])
    held_idx = np.sort(np.concatenate(held)) if held else np.zeros(0, dtype=np.int64)
    if len(held_idx) == 0:
        raise ConfigError("selection_holdout: no class has two training images; nothing can be held out")
    kept = np.setdiff1d(np.arange(len(labels)), held_idx)
    return kept, held_idx


class IndexedSource:
    """The images ``indices`` of a split reader, in that order (the ImageSource contract)."""

    def __init__(self, reader, indices: np.ndarray, tag: str):
        self.reader, self.indices, self.tag = reader, [int(i) for i in indices], tag
        self.classes = reader.classes
        self.targets = [reader.targets[i] for i in self.indices]
        self.thread_safe = getattr(reader, "thread_safe", True)
        paths = getattr(reader, "image_paths", None)
        if paths is not None:
            self.image_paths = [paths[i] for i in self.indices]

    def __len__(self) -> int:
        return len(self.indices)

    def load_image(self, i: int):
        return self.reader.load_image(self.indices[i])

    def fingerprint(self) -> str:
        chosen = hashlib.sha256(np.asarray(self.indices, dtype=np.int64).tobytes()).hexdigest()
        return hashlib.sha256(f"{self.reader.fingerprint()}|{self.tag}={chosen}".encode()).hexdigest()


class SelectionHoldoutSetting:
    """For a protocol whose configuration has ``selection_holdout`` and ``selection_seed`` (both in its
    ``NOT_IN_FINGERPRINT``: they join the fingerprint here, only when the holdout is on)."""

    def holdout_on(self) -> bool:
        return self.cfg.selection_holdout > 0

    def fingerprint(self, extra: dict | None = None) -> str:
        items = ({"selection_holdout": self.cfg.selection_holdout, "selection_seed": self.cfg.selection_seed}
                 if self.holdout_on() else {})
        return super().fingerprint({**(extra or {}), **items})

    def carve_holdout(self, splits):
        """(``splits`` with the held-out images taken out of its training split, the held-out
        images as a source, their labels)."""
        c = self.cfg
        kept, held = carve(splits.train_labels, c.selection_holdout, c.selection_seed)
        tag = f"holdout{c.selection_holdout}/{c.selection_seed}"
        fit = dataclasses.replace(splits, train=IndexedSource(splits.train, kept, tag + "/kept"),
                                  train_labels=splits.train_labels[kept])
        return fit, IndexedSource(splits.train, held, tag + "/held"), splits.train_labels[held]

    def holdout_params(self, n_fit: int, n_held: int) -> dict:
        return {"selection_holdout": self.cfg.selection_holdout, "selection_seed": self.cfg.selection_seed,
                "n_selection_fit": n_fit, "n_selection_holdout": n_held}
