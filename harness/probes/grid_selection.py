"""How a swept probe's reported number was chosen, and what the chosen head did on its own
training data (harness.data.holdout carves the selection split).

The papers choose the best epoch and learning rate on the evaluation split itself; that number is
kept, its column reading "[eval-split best]" (the declaration's ``variant_defaults``). With a
holdout, two more results: the (epoch, lr) chosen on the held-out training images ("holdout best")
and the last epoch with the lr chosen there ("holdout last epoch"), both from heads trained on the
rest of the training split and measured on the evaluation split.
"""
from __future__ import annotations

from harness.probes.linear_grid import GridHistory

EVAL_BEST = "eval-split best"  # the declaration's variant_defaults for a result without "selection"
HOLDOUT_BEST = "holdout best"
HOLDOUT_LAST = "holdout last epoch"


def first_best(row: list[float]) -> int:
    """The first head with the highest value."""
    return max(range(len(row)), key=lambda h: (row[h], -h))


def fit_params(hist: GridHistory, e: int, h: int) -> dict:
    """The chosen head's training loss and top-1 over the training batches of its epoch (as it saw
    them while training, augmented where the recipe augments): an underfit probe shows here."""
    epoch = hist.epochs[e] - 1
    return {"train_loss": hist.train_loss[epoch][h], "train_top1": hist.train_top1[epoch][h]}


def last_epoch_params(hist: GridHistory, h: int) -> dict:
    """The chosen head's number at the last evaluation, beside the best-epoch number."""
    return {"last_epoch_top1": hist.top1[-1][h], "last_epoch": hist.epochs[-1]}


def holdout_choices(hist: GridHistory) -> dict[str, tuple[int, int]]:
    """(evaluation index, head) per holdout selection: the best on the selection split over every
    evaluation and head, and the best head on it at the last evaluation."""
    crit = hist.select_top1
    best = max(((e, h) for e in range(len(crit)) for h in range(len(crit[e]))),
               key=lambda eh: (crit[eh[0]][eh[1]], -eh[0], -eh[1]))
    last = len(crit) - 1
    return {HOLDOUT_BEST: best, HOLDOUT_LAST: (last, first_best(crit[last]))}
