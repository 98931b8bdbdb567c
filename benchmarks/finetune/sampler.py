"""Repeated augmentation as DeiT's ``RASampler`` draws it (facebookresearch/deit @ 7e160fe
``samplers.py``; the same class in bytedance/ibot @ da316d8 ``evaluation/eval_cls.py`` and
``evaluation/semi_supervised/eval_cls.py``, whose defaults switch it on).

The official sampler, on ``W`` processes at epoch ``e``: a permutation of the data set drawn by a
``torch.Generator`` seeded with ``e`` alone (not the run's seed), each index written 3 times in a
row, process ``r`` taking every ``W``-th entry from ``r``, the first ``floor(n / 256) x 256 / W``
of them; the loader cuts those into batches and drops the rest. For every ``W`` that divides 256
the processes' batches of one step are, together, one contiguous stretch of that tripled list,
so the epoch does not depend on ``W``: ``floor(floor(n / 256) x 256 / batch)`` steps, step ``s``
the entries ``[s x batch, (s + 1) x batch)``, process ``r`` the entries ``r, r + W, ...`` of it.
On one process each image's three copies sit side by side in one batch, and an epoch covers
about a third of the images (each three times).

Each entry is ``(index, repeat)``: the copies of one image are augmented with different seeds.
"""
from __future__ import annotations

import torch

REPEATS = 3  # RASampler's repeats (hard-coded in iBOT's copy, the default in DeiT's)
EPOCH_MULTIPLE = 256  # RASampler keeps floor(n / 256) x 256 entries an epoch


def epoch_length(n_images: int) -> int:
    """Entries of the tripled list that one epoch uses (all processes together)."""
    return n_images // EPOCH_MULTIPLE * EPOCH_MULTIPLE


def steps_per_epoch(n_images: int, batch_size: int) -> int:
    return epoch_length(n_images) // batch_size


def epoch_entries(n_images: int, epoch: int) -> list[tuple[int, int]]:
    """The epoch's used part of the tripled list, as (index, repeat)."""
    g = torch.Generator()
    g.manual_seed(epoch)
    order = torch.randperm(n_images, generator=g).tolist()
    tripled = [(i, r) for i in order for r in range(REPEATS)]
    return tripled[:epoch_length(n_images)]


def micro_batches(n_images: int, batch_size: int, update_freq: int, epoch: int) -> list[list[tuple[int, int]]]:
    """The epoch's micro-batches in order (all processes' entries): each optimisation step's
    ``batch_size`` entries cut into ``update_freq`` micro-batches."""
    entries = epoch_entries(n_images, epoch)
    micro = batch_size // update_freq
    steps = len(entries) // batch_size
    return [entries[s * batch_size + m * micro: s * batch_size + (m + 1) * micro]
            for s in range(steps) for m in range(update_freq)]


def rank_share(batch: list, rank: int, world: int) -> list:
    """Process ``rank``'s entries of a micro-batch, as RASampler deals them: every ``world``-th."""
    return batch[rank::world]


def official_rank_order(n_images: int, batch_size: int, epoch: int, rank: int, world: int) -> list[int]:
    """The indices process ``rank`` trains on in an epoch, in order (for the parity test against the
    official sampler's iteration, cut to whole batches as its loader's ``drop_last``)."""
    out = []
    for batch in micro_batches(n_images, batch_size, 1, epoch):
        out += [i for i, _ in rank_share(batch, rank, world)]
    return out
