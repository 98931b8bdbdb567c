"""k-means on frozen features, the second cluster assignment of the unsupervised-classification
protocol (unsup_cls.py has only the head's argmax; the issue asks for k-means for every model,
head or not).

Recipe (ssl-bench's, stated because no official script fixes one): faiss ``Kmeans`` (faiss-cpu is
a dependency of ssl-bench already) with k = the number of classes, ``niter`` Lloyd iterations
(default 100), one run (``nredo=1``), ``seed`` 0 for faiss's initial centroids (a random sample
of k images), every image used (no subsampling: ``max_points_per_centroid`` = the images), on
the evaluation split's L2-normalised features, each image assigned to its nearest centroid (L2).
"""
from __future__ import annotations

import numpy as np

from harness.errors import DataError


def kmeans_assign(features: np.ndarray, k: int, *, niter: int, seed: int) -> tuple[np.ndarray, float]:
    """(cluster of each row, final k-means objective) for L2-normalised float32 ``features``."""
    import faiss

    x = np.ascontiguousarray(features, dtype=np.float32)
    if not np.isfinite(x).all():
        raise DataError("features contain NaN or inf; the backbone produced non-finite outputs")
    n, d = x.shape
    if n < k:
        raise DataError(f"k-means with {k} clusters needs at least {k} images, found {n}")
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    x = x / np.maximum(norms, 1e-12)  # torch.nn.functional.normalize(dim=1, p=2), eps 1e-12
    km = faiss.Kmeans(d, k, niter=niter, nredo=1, seed=seed, verbose=False, max_points_per_centroid=n,
                      min_points_per_centroid=1)
    km.train(x)
    _, assign = km.index.search(x, 1)
    return assign[:, 0].astype(np.int64), float(km.obj[-1]) if len(km.obj) else float("nan")
