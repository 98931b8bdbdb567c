"""The learning-rate schedules of the fine-tuning recipes other than BEiT's per-step array
(``train.official_cosine``), each as one value per optimisation step.

- ``per_epoch``: DeiT's (facebookresearch/deit @ 7e160fe ``main.py``; bytedance/ibot @ da316d8
  ``evaluation/eval_cls.py`` and ``evaluation/semi_supervised/eval_cls.py``): timm's
  ``CosineLRScheduler`` built by ``create_scheduler`` (``t_in_epochs``, ``t_initial = epochs``,
  warm-up from ``warmup_lr`` over ``warmup_epochs`` inside the cosine, no warm-up prefix) and
  stepped with ``lr_scheduler.step(epoch)`` after each epoch. The scheduler sets ``warmup_lr`` when
  it is built, so epochs 0 and 1 both train at ``warmup_lr`` and epoch ``e >= 1`` at the value for
  ``e - 1``; the lr is constant within an epoch.
- ``mae``: MAE's ``util/lr_sched.adjust_learning_rate`` (google-research/syn-rep-learn @ 45f451b
  ``SynCLR/eval``): before each optimisation step, at the fractional epoch ``epoch + k / steps``,
  a linear warm-up from 0 over ``warmup_epochs`` then a half-cycle cosine to ``min_lr`` over the
  remaining ``epochs - warmup_epochs``.
"""
from __future__ import annotations

import math

import numpy as np


def timm_epoch_value(t: int, peak: float, min_lr: float, warmup_lr: float, epochs: int, warmup_epochs: int) -> float:
    """timm ``CosineLRScheduler._get_lr(t)`` for one cycle of ``epochs`` (k_decay 1, no noise)."""
    if t < warmup_epochs:
        return warmup_lr + t * (peak - warmup_lr) / warmup_epochs
    if t >= epochs:  # past the cycle limit
        return min_lr
    return min_lr + 0.5 * (peak - min_lr) * (1.0 + math.cos(math.pi * t / epochs))


def per_epoch_lrs(peak: float, min_lr: float, warmup_lr: float, epochs: int, warmup_epochs: int) -> np.ndarray:
    """The lr each epoch trains at under DeiT's loop (the value set after the previous epoch)."""
    first = warmup_lr if warmup_epochs > 0 else peak  # what the scheduler sets when it is built
    values = [first] + [timm_epoch_value(e - 1, peak, min_lr, warmup_lr, epochs, warmup_epochs)
                        for e in range(1, epochs)]
    return np.asarray(values, dtype=np.float64)


def per_epoch_schedule(peak: float, min_lr: float, warmup_lr: float, epochs: int, warmup_epochs: int,
                       steps_per_epoch: int) -> np.ndarray:
    return np.repeat(per_epoch_lrs(peak, min_lr, warmup_lr, epochs, warmup_epochs), steps_per_epoch)


def mae_value(epoch: float, peak: float, min_lr: float, epochs: int, warmup_epochs: float) -> float:
    if epoch < warmup_epochs:
        return peak * epoch / warmup_epochs
    return min_lr + (peak - min_lr) * 0.5 * (1.0 + math.cos(math.pi * (epoch - warmup_epochs)
                                                           / (epochs - warmup_epochs)))


def mae_schedule(peak: float, min_lr: float, epochs: int, warmup_epochs: float, steps_per_epoch: int) -> np.ndarray:
    """One value per optimisation step: step ``k`` of epoch ``e`` at ``e + k / steps_per_epoch``
    (with accumulation the official sets it on the step's first micro-batch, at the same fraction)."""
    return np.asarray([mae_value(e + k / steps_per_epoch, peak, min_lr, epochs, warmup_epochs)
                       for e in range(epochs) for k in range(steps_per_epoch)], dtype=np.float64)
