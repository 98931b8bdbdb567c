"""95% intervals of one-seed cells: a seeded bootstrap over the evaluation images.

A leaderboard cell measured with one seed has no spread over seeds to show. Where its record
keeps per-image statistics (the ``per_image`` block, harness.per_image), the metric is recomputed
on ``RESAMPLES`` resamples of the evaluation images drawn with replacement, and the interval is
the 2.5th and 97.5th percentiles of those values (the percentile bootstrap). The resamples come
from ``numpy.random.default_rng(SEED)``: the same records give the same interval.

How a resample is drawn, by the kind of statistics:

- ``hits`` (accuracies): the number of hits among N images drawn with replacement is
  Binomial(N, hits / N), so each metric's resampled hit counts are drawn as that directly (one
  draw per resample, whatever N is; each metric's interval depends only on its own counts);
- ``areas`` (segmentation): N image indices drawn with replacement per resample, the
  statistics summed over them (how many times each image is drawn, times its counts: one
  matrix product), then the protocol's own mIoU and pixel accuracy (harness.per_image).
"""
from __future__ import annotations

import functools
import logging
from dataclasses import dataclass

import numpy as np

from harness.per_image import HITS, PerImageError, PerImageStats, read_per_image

log = logging.getLogger(__name__)

RESAMPLES = 1000
SEED = 0
LEVEL = 95.0  # percent


@dataclass(frozen=True)
class BootstrapInterval:
    low: float
    high: float
    images: int
    resamples: int
    seed: int

    @property
    def method(self) -> str:
        """What the leaderboard's ``ci_method`` column says about it."""
        return f"bootstrap over {self.images} images, {self.resamples} resamples, seed {self.seed}"


CHUNK = 1 << 21  # image draws held at once (resamples x images) for ``areas``: 16 MB of counts


def resampled_sums(stats: PerImageStats, resamples: int = RESAMPLES, seed: int = SEED) -> np.ndarray:
    """(resamples, K): the statistics summed over each resample of the images."""
    rng = np.random.default_rng(seed)
    n = stats.images
    totals = stats.rows.sum(0)
    if stats.kind == HITS:
        return np.stack([rng.binomial(n, t / n, size=resamples) for t in totals], axis=1).astype(np.float64)
    rows = stats.rows.astype(np.float64)
    if resamples * n <= CHUNK:  # the common case: one draw matrix, shared by every cell of n images
        return image_counts(n, resamples, seed) @ rows
    out = np.empty((resamples, rows.shape[1]))
    step = max(1, CHUNK // max(n, 1))
    for a in range(0, resamples, step):
        b = min(resamples, a + step)
        out[a:b] = _draw_counts(rng, n, b - a) @ rows
    return out


def _draw_counts(rng: np.random.Generator, n: int, resamples: int) -> np.ndarray:
    """(resamples, n): how many times each image is drawn, n draws with replacement per resample."""
    idx = rng.integers(0, n, size=(resamples, n), dtype=np.int64 if n * resamples >= 2**31 else np.int32)
    idx += (n * np.arange(resamples, dtype=idx.dtype))[:, None]
    return np.bincount(idx.ravel(), minlength=resamples * n).reshape(resamples, n).astype(np.float64)


@functools.lru_cache(maxsize=4)
def image_counts(n: int, resamples: int, seed: int) -> np.ndarray:
    """The draws of ``resampled_sums`` for n images (read-only): a pure function of (n,
    resamples, seed), so the cells of every model on one evaluation set share it."""
    counts = _draw_counts(np.random.default_rng(seed), n, resamples)
    counts.flags.writeable = False
    return counts


def metric_values(stats: PerImageStats, metrics: list[str], resamples: int = RESAMPLES,
                  seed: int = SEED) -> dict[str, np.ndarray]:
    """Each of ``metrics`` on every resample: {metric: (resamples,)}."""
    sums = resampled_sums(stats, resamples, seed)
    return {m: stats.metrics_of_sums(sums, m) for m in metrics}


def intervals(stats: PerImageStats, metrics: list[str], resamples: int = RESAMPLES,
              seed: int = SEED) -> dict[str, BootstrapInterval]:
    """The 95% percentile-bootstrap interval of each of ``metrics`` the statistics can recompute."""
    wanted = [m for m in metrics if m in stats.metrics]
    if not wanted or stats.images == 0:
        return {}
    tail = (100.0 - LEVEL) / 2
    out = {}
    for m, values in metric_values(stats, wanted, resamples, seed).items():
        finite = values[np.isfinite(values)]
        if finite.size == 0:
            continue
        low, high = np.percentile(finite, [tail, 100.0 - tail])
        out[m] = BootstrapInterval(float(low), float(high), stats.images, resamples, seed)
    return out


def record_intervals(record_id: str, block, metrics: list[str], resamples: int = RESAMPLES,
                     seed: int = SEED) -> dict[str, BootstrapInterval]:
    """:func:`intervals` of a record's ``per_image`` block; a block that cannot be read is
    treated as absent, with one warning line naming the record."""
    try:
        stats = read_per_image(block)
    except PerImageError as exc:
        log.warning("record %s: its per_image block is unreadable (%s); its cells get no bootstrap interval",
                    record_id, exc)
        return {}
    return intervals(stats, metrics, resamples, seed)


__all__ = ["RESAMPLES", "SEED", "BootstrapInterval", "resampled_sums", "metric_values", "intervals",
           "record_intervals"]
