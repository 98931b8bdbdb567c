"""The per-image statistics of unsupervised classification (harness.per_image kind ``clusters``).

ARI, NMI, FMI and the matched ACC are functions of the whole contingency table, not sums of
per-image numbers, and the matching of clusters to classes is part of the estimator: a bootstrap
resample of the images is scored by rebuilding its contingency table and computing all four
anew, the Hungarian matching included (``hits`` with the matching held fixed would leave the
matching's own variability out of the interval and give ARI/NMI/FMI none at all).

The block stores each image's (label, cluster) pair as an index into the list of distinct pairs;
``rows`` is the sparse one-hot (images x pairs) matrix, so a resample's summed row is its
contingency table, flattened over the pairs present.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from harness.per_image import PerImageError, PerImageStats, decode_array, encode_array, register_kind

from benchmarks.unsup_cls.metrics import AccUndefined, acc, ari, fmi, nmi

KIND = "clusters"
METRICS = ("ACC", "ARI", "NMI", "FMI")


def clusters_block(labels: np.ndarray, clusters: np.ndarray, *, matching: str, copies: int = 1) -> dict[str, Any]:
    """The ``per_image`` block of one assignment: the distinct (label, cluster) pairs and each
    image's pair; ``copies``: the table is scored as that many stacked copies of the images."""
    pairs, index = np.unique(np.stack([np.asarray(labels), np.asarray(clusters)], 1), axis=0, return_inverse=True)
    return {"kind": KIND, "metrics": list(METRICS), "images": int(len(index)), "matching": matching,
            "copies": int(copies),
            "pairs": encode_array(pairs.astype(np.int64)), "index": encode_array(index.ravel().astype(np.int64))}


@register_kind(KIND)
class ClusterStats(PerImageStats):
    """Each image's (label, cluster); every metric recomputed from each resample's table."""

    def read_rows(self, block):
        import scipy.sparse as sp

        pairs, index = decode_array(block.get("pairs")), decode_array(block.get("index"))
        if pairs.ndim != 2 or pairs.shape[1] != 2 or index.ndim != 1 or (index.size and index.max() >= len(pairs)):
            raise PerImageError(f"clusters block with pairs {pairs.shape} and index {index.shape}")
        self.matching = str(block.get("matching", "official"))
        self.copies = int(block.get("copies", 1))
        self.label_values, li = np.unique(pairs[:, 0], return_inverse=True)
        self.cluster_values, ci = np.unique(pairs[:, 1], return_inverse=True)
        self.pair_cells = (li.ravel(), ci.ravel())
        n = len(index)
        return sp.csr_matrix((np.ones(n, dtype=np.int64), (np.arange(n), index.astype(np.int64))),
                             shape=(n, len(pairs)))

    def metric_of(self, sums, metric):
        out = np.empty(sums.shape[0])
        shape = (len(self.label_values), len(self.cluster_values))
        for b, row in enumerate(np.asarray(sums)):
            table = np.zeros(shape, dtype=np.int64)
            table[self.pair_cells] = np.rint(row).astype(np.int64) * self.copies
            out[b] = 100.0 * self._score(table, metric)
        return out

    def _score(self, table: np.ndarray, metric: str) -> float:
        if metric != "ACC":
            return {"ARI": ari, "NMI": nmi, "FMI": fmi}[metric](table)
        try:
            return acc(table, self.label_values, self.cluster_values, self.matching)
        except AccUndefined:  # a resample without some class: the official matching has no value
            return float("nan")
