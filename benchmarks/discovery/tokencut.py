"""TokenCut (Wang et al., CVPR 2022): one object box per image by a normalized cut of the patch graph.

As YangtaoWANG95/TokenCut at fed52cd runs it (object_discovery.py `ncut`, main_tokencut.py):
the same keys and padded input as LOST; the patch keys L2-normalised, cosine similarities
thresholded into a graph (1 where > tau = 0.2, else eps = 1e-5; the diagonal kept), the second
smallest generalized eigenvector of (D - A) v = lambda D v (scipy.linalg.eigh), the patches above
its mean as foreground, flipped so that the patch of largest |v| (the seed) is foreground, and the
box of the seed's 4-connected foreground component (`detect_box`, as LOST's).
"""
from __future__ import annotations

import numpy as np
import scipy.linalg
import torch
import torch.nn.functional as F

from benchmarks.discovery.lost import Discovery, image_box, seed_component_box


def patch_graph(features: torch.Tensor, tau: float, eps: float, binary: bool = True) -> np.ndarray:
    """(N, N) edge weights: 1 / eps by cosine similarity > tau (float64, as np.where makes them), or
    with ``binary`` off the similarities themselves with those < tau set to eps (float32)."""
    f = F.normalize(features, p=2)
    a = (f @ f.t()).cpu().numpy()
    if not binary:
        a[a < tau] = eps
        return a
    return np.where(a > tau, 1.0, eps)


def second_eigenvector(a: np.ndarray) -> np.ndarray:
    """The generalized eigenvector of (D - A) v = lambda D v with the second smallest eigenvalue."""
    d = np.diag(a.sum(axis=1))
    _, vectors = scipy.linalg.eigh(d - a, d, subset_by_index=[1, 2])
    return np.copy(vectors[:, 0])


def tokencut(features: torch.Tensor, grid: tuple[int, int], scales, image_hw: tuple[int, int],
             tau: float = 0.2, eps: float = 1e-5, binary: bool = True) -> Discovery:
    """TokenCut on one image's (rows*cols, D) patch features (row-major)."""
    if features.ndim != 2 or features.shape[0] != grid[0] * grid[1]:
        raise ValueError(f"features {tuple(features.shape)} do not fit a {grid[0]}x{grid[1]} grid")
    vec = second_eigenvector(patch_graph(features, tau, eps, binary))
    foreground = vec > np.sum(vec) / len(vec)
    seed = int(np.argmax(np.abs(vec)))
    if not foreground[seed]:
        vec, foreground = -vec, ~foreground
    grid_box = seed_component_box(foreground.astype(float), seed, grid)
    return Discovery(image_box(grid_box, scales, image_hw), grid_box, seed, vec)
