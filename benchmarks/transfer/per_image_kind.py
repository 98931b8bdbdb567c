"""Per-image statistics of linear transfer (harness.per_image kinds ``class_hits`` and ``voc11``).

- ``class_hits``: each image's class and hit; a resample's sums are per-class hits and counts, its
  metric the mean of per-class accuracies over the classes the resample holds (a plain ``hits``
  block would weigh classes by their size and give top-1, not this).
- ``voc11``: each image's decision value and 0/1 label per class; AP is no sum of per-image numbers,
  so a resample is scored by the 11-point AP of its images weighted by their counts
  (benchmarks.transfer.metrics.mean_ap), the same code the protocol reports with.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from harness.per_image import PerImageError, PerImageStats, decode_array, encode_array, register_kind

from benchmarks.transfer.metrics import mean_ap

CLASS_HITS = "class_hits"
VOC11 = "voc11"


def class_hits_block(labels: np.ndarray, hits: np.ndarray, num_classes: int) -> dict[str, Any]:
    return {"kind": CLASS_HITS, "metrics": ["mean_per_class"], "images": int(len(labels)),
            "num_classes": int(num_classes), "labels": encode_array(np.asarray(labels, dtype=np.int64)),
            "hits": encode_array(np.asarray(hits, dtype=np.uint8))}


def voc11_block(scores: np.ndarray, labels: np.ndarray, curve: str) -> dict[str, Any]:
    return {"kind": VOC11, "metrics": ["mAP"], "images": int(len(labels)), "curve": curve,
            "scores": encode_array(np.asarray(scores, dtype=np.float64)),
            "labels": encode_array(np.asarray(labels, dtype=np.uint8))}


@register_kind(CLASS_HITS)
class ClassHitsStats(PerImageStats):
    """Rows: one-hot(class) x hit, then one-hot(class); sums are per-class hits and counts."""

    def read_rows(self, block):
        labels, hits = decode_array(block.get("labels")), decode_array(block.get("hits"))
        c = int(block.get("num_classes", 0))
        if labels.ndim != 1 or hits.shape != labels.shape or (labels.size and (labels.min() < 0 or labels.max() >= c)):
            raise PerImageError(f"class_hits block with labels {labels.shape}, hits {hits.shape}, {c} classes")
        self.num_classes = c
        onehot = np.zeros((labels.size, c), dtype=np.int64)
        onehot[np.arange(labels.size), labels] = 1
        return np.concatenate([onehot * hits.astype(np.int64)[:, None], onehot], axis=1)

    def metric_of(self, sums, metric):
        c = self.num_classes
        hits, counts = sums[:, :c], sums[:, c:]
        acc = np.divide(hits, counts, out=np.full_like(hits, np.nan), where=counts > 0)
        with np.errstate(invalid="ignore"):
            return 100.0 * np.nanmean(acc, axis=1)


@register_kind(VOC11)
class Voc11Stats(PerImageStats):
    """Rows: the identity (sums are each image's count in the resample); scores and labels kept."""

    def read_rows(self, block):
        import scipy.sparse as sp

        self.scores, self.labels = decode_array(block.get("scores")), decode_array(block.get("labels"))
        if self.scores.ndim != 2 or self.scores.shape != self.labels.shape:
            raise PerImageError(f"voc11 block with scores {self.scores.shape} and labels {self.labels.shape}")
        self.curve = str(block.get("curve", "sklearn"))
        return sp.identity(self.scores.shape[0], dtype=np.int64, format="csr")

    def metric_of(self, sums, metric):
        return mean_ap(self.scores, self.labels, weights=np.asarray(sums), curve=self.curve)
