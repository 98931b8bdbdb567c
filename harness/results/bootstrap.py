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
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

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


# ----------------------------------------------------------------------------- kept intervals
CACHE_FILE = "intervals-v1.sqlite"  # in the records folder's .index/, beside the records index
_CACHE_SCHEMA = """
CREATE TABLE IF NOT EXISTS intervals (
    record_id TEXT NOT NULL, file TEXT NOT NULL, mtime_ns INTEGER NOT NULL, size INTEGER NOT NULL,
    resamples INTEGER NOT NULL, seed INTEGER NOT NULL, level REAL NOT NULL, metric TEXT NOT NULL,
    low REAL, high REAL, images INTEGER,  -- NULL: the block gives this metric no interval
    PRIMARY KEY (record_id, file, mtime_ns, size, resamples, seed, level, metric)
);
"""


@dataclass
class PerImageSource:
    """Where a table's per-image blocks are: ``blocks`` (record id -> block) of records given
    as dicts, else the records folder's ``index`` (harness.results.index.RecordIndex), whose
    file ``stamps`` ({file: (mtime_ns, size)}) key the intervals kept beside it."""

    blocks: dict[str, Any] = field(default_factory=dict)
    index: Any = None
    stamps: dict[str, tuple[int, int]] = field(default_factory=dict)

    def block(self, record_id: str, file: str) -> Any:
        if record_id in self.blocks:
            return self.blocks[record_id]
        rec = self.index.record(file) if self.index is not None and file else None
        return rec.get("per_image") if isinstance(rec, dict) else None

    def cache_path(self) -> Path | None:
        """The kept intervals' file: beside the index of a records folder; None in memory."""
        if self.index is None or getattr(self.index, "in_memory", False):
            return None
        return Path(self.index.path).parent / CACHE_FILE


def kept_intervals(source: PerImageSource, wanted: dict[str, tuple[str, list[str]]], resamples: int = RESAMPLES,
                   seed: int = SEED) -> dict[tuple[str, str], BootstrapInterval]:
    """(record id, metric) -> interval of each record's metrics (``wanted``: record id -> (file,
    metrics)). Of a records folder's records, each interval is computed once and kept on disk
    beside its index, keyed by the record id, its file's stamp and the resample settings: a
    changed file, or other settings, compute again. Records given as dicts are computed."""
    path = source.cache_path()
    db = _open_cache(path) if path is not None and wanted else None
    known = _read_kept(db, resamples, seed) if db is not None else {}
    out, new_rows = {}, []
    for rid, (file, metrics) in wanted.items():
        stamp = source.stamps.get(file)  # None: no file of the folder holds it, nothing is kept
        keys = {m: (rid, file, *stamp, m) for m in metrics} if stamp is not None else {}
        if db is not None and keys and all(k in known for k in keys.values()):
            out.update({(rid, m): known[k] for m, k in keys.items() if known[k] is not None})
            continue
        block = source.block(rid, file)
        found = record_intervals(rid, block, metrics, resamples, seed) if block is not None else {}
        out.update({(rid, m): ci for m, ci in found.items()})
        if keys:
            new_rows += [(rid, file, *stamp, resamples, seed, LEVEL, m, *_bounds(found.get(m))) for m in metrics]
    if db is not None:
        _keep(db, new_rows)
        db.close()
    return out


def _bounds(ci: BootstrapInterval | None) -> tuple:
    return (None, None, None) if ci is None else (ci.low, ci.high, ci.images)


def _open_cache(path: Path) -> sqlite3.Connection | None:
    try:
        path.parent.mkdir(exist_ok=True)
        db = sqlite3.connect(str(path), timeout=60, isolation_level=None)
        db.execute("PRAGMA synchronous=OFF")  # a cache: a torn file is dropped and computed again
        db.executescript(_CACHE_SCHEMA)
        return db
    except sqlite3.DatabaseError:  # damaged or not ours: start again
        path.unlink(missing_ok=True)
        return None
    except OSError:  # a folder we cannot write to: compute, keep nothing
        return None


def _read_kept(db: sqlite3.Connection, resamples: int, seed: int) -> dict[tuple, BootstrapInterval | None]:
    rows = db.execute("SELECT record_id, file, mtime_ns, size, metric, low, high, images FROM intervals "
                      "WHERE resamples = ? AND seed = ? AND level = ?", (resamples, seed, LEVEL)).fetchall()
    return {(rid, f, m, s, metric): (None if low is None else BootstrapInterval(low, high, images, resamples, seed))
            for rid, f, m, s, metric, low, high, images in rows}


def _keep(db: sqlite3.Connection, rows: list[tuple]) -> None:
    if not rows:
        return
    try:
        db.execute("BEGIN IMMEDIATE")
        # a record's intervals under an older stamp of its file are never asked for again
        db.executemany("DELETE FROM intervals WHERE record_id = ? AND file = ? AND (mtime_ns != ? OR size != ?)",
                       list(dict.fromkeys(r[:4] for r in rows)))
        db.executemany("INSERT OR REPLACE INTO intervals VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", rows)
        db.execute("COMMIT")
    except sqlite3.Error:  # kept next time: what is served is already computed
        if db.in_transaction:
            db.execute("ROLLBACK")


__all__ = ["RESAMPLES", "SEED", "BootstrapInterval", "resampled_sums", "metric_values", "intervals",
           "record_intervals", "PerImageSource", "kept_intervals", "CACHE_FILE"]
