"""Per-step schedules: the engine's lr / weight-decay / EMA-momentum curves and the base
of any schedule a method holds (teacher temperatures), which training logs show."""
from __future__ import annotations

import numpy as np


def cosine_schedule(base: float, final: float, total_steps: int, warmup_steps: int = 0,
                    start_warmup: float = 0.0) -> np.ndarray:
    """DINO ``cosine_scheduler`` with steps instead of epochs x iterations per epoch:
    linear warm-up from ``start_warmup`` to ``base`` over ``warmup_steps`` (np.linspace,
    endpoint included), then half a cosine from ``base`` to ``final``."""
    if total_steps <= 0 or not 0 <= warmup_steps <= total_steps:
        raise ValueError(f"need 0 <= warmup_steps ({warmup_steps}) <= total_steps ({total_steps}), total > 0")
    warmup = np.linspace(start_warmup, base, warmup_steps) if warmup_steps > 0 else np.array([])
    iters = np.arange(total_steps - warmup_steps)
    cosine = final + 0.5 * (base - final) * (1 + np.cos(np.pi * iters / max(len(iters), 1)))
    schedule = np.concatenate((warmup, cosine))
    assert len(schedule) == total_steps
    return schedule


class StepSchedule:
    """A value a method schedules per step (e.g. a teacher temperature): called with the
    engine's ``StepInfo``, returns the value of that step. ``Method.logged_schedules`` logs
    every attribute of a method that is one."""

    def __call__(self, step) -> float:
        raise NotImplementedError
