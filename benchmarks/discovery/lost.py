"""LOST (Siméoni et al., BMVC 2021): one object box per image from a ViT's patch keys.

Each step follows valeoai/LOST at fcedbec (object_discovery.py, main_lost.py, datasets.py):

1. similarity ``A = F F^T`` of the raw (not normalised) patch features (object_discovery.py `lost`);
2. degree = how many OTHER patches correlate positively with a patch (`patch_scoring`: diagonal
   zeroed, ``A > 0`` counted); patches sorted by increasing degree; the seed is the first;
3. seed expansion: of the ``k_patches`` lowest-degree patches, those correlating positively with
   the seed; their rows of ``A`` summed give a map ``M``;
4. the box of the 4-connected component of ``M > 0`` that holds the seed (`detect_box`,
   scipy.ndimage.label's default structure), exclusive max, scaled by the patch size and
   clipped to the unpadded image (the image was zero-padded at the bottom/right).

CorLoc: an image is found when its box has IoU >= 0.5 with ANY ground-truth box (main_lost.py),
the IoU being LOST's `bbox_iou` (yolov5's), computed here with the same arithmetic: integer boxes
with a float eps in the heights, so torch computes in float32 and an IoU of exactly 0.5 counts.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.ndimage
import torch

IOU_EPS = 1e-7  # datasets.py bbox_iou's eps
CORLOC_IOU = 0.5


@dataclass
class Discovery:
    """What a discovery method finds in one image: the box in image pixels (x0, y0, x1, y1), the box
    on the patch grid (row0, col0, row1, col1, exclusive), the seed's flat patch index and the
    per-patch scores it chose the seed by (LOST: the degrees; TokenCut: the eigenvector)."""

    box: tuple[int, int, int, int] | tuple[float, float, float, float]
    grid_box: tuple[int, int, int, int]
    seed: int
    scores: np.ndarray


def patch_degrees(similarity: torch.Tensor) -> torch.Tensor:
    """(N,) how many other patches each patch correlates positively with (`patch_scoring`)."""
    a = similarity.clone()
    a.fill_diagonal_(0)
    return (a > 0).sum(dim=1)


def lowest_degree_order(degree: torch.Tensor) -> torch.Tensor:
    """Patch indices by increasing degree. LOST sorts ``-degree`` descending with torch.argsort;
    ties keep index order here (stable), which is what that call gives on the CPU (the parity
    fixture has ties); on CUDA the unstable sort may order ties otherwise."""
    return torch.argsort(-degree.to(torch.float32), descending=True, stable=True)


def seed_expansion(similarity: torch.Tensor, order: torch.Tensor, k_patches: int) -> tuple[int, torch.Tensor]:
    """(seed, M): the seed and the summed similarity rows of the low-degree patches like it."""
    seed = order[0]
    potentials = order[:k_patches]
    similars = potentials[similarity[seed, potentials] > 0.0]
    return int(seed), similarity[similars, :].sum(dim=0)


def seed_component_box(m: np.ndarray, seed: int, grid: tuple[int, int]) -> tuple[int, int, int, int]:
    """(row0, col0, row1, col1), max exclusive: the box of the 4-connected component of
    ``m > 0`` on the (rows, cols) grid that holds the seed (TokenCut's detect_box is the same)."""
    labeled, _ = scipy.ndimage.label(np.asarray(m).reshape(grid) > 0.0)
    cc = labeled[np.unravel_index(seed, grid)]
    if cc == 0:  # LOST raises too: the seed correlates positively with itself, so never for keys
        raise ValueError("the seed is in the background component")
    rows, cols = np.nonzero(labeled == cc)
    return int(rows.min()), int(cols.min()), int(rows.max()) + 1, int(cols.max()) + 1


def image_box(grid_box, scales, image_hw: tuple[int, int]):
    """The grid box in image pixels (x0, y0, x1, y1), clipped to the unpadded image."""
    r0, c0, r1, c1 = grid_box
    x0, x1 = scales[1] * c0, scales[1] * c1
    y0, y1 = scales[0] * r0, scales[0] * r1
    return (x0, y0, min(x1, image_hw[1]), min(y1, image_hw[0]))


def lost(features: torch.Tensor, grid: tuple[int, int], scales, image_hw: tuple[int, int],
         k_patches: int = 100) -> Discovery:
    """LOST on one image's (rows*cols, D) patch features (row-major), ``scales`` = (sy, sx)
    pixels per patch, ``image_hw`` the size before padding."""
    if features.ndim != 2 or features.shape[0] != grid[0] * grid[1]:
        raise ValueError(f"features {tuple(features.shape)} do not fit a {grid[0]}x{grid[1]} grid")
    similarity = features @ features.t()
    degree = patch_degrees(similarity)
    seed, m = seed_expansion(similarity, lowest_degree_order(degree), k_patches)
    grid_box = seed_component_box(m.float().cpu().numpy(), seed, grid)
    return Discovery(image_box(grid_box, scales, image_hw), grid_box, seed, degree.cpu().numpy())


def box_iou(box, gt_boxes) -> np.ndarray:
    """(n,) IoU of one (x0, y0, x1, y1) box with n ground-truth boxes, as LOST's bbox_iou computes
    it (from numpy arrays through torch, the eps added to the heights and to the union)."""
    b1 = torch.from_numpy(np.asarray(box))
    b2 = torch.from_numpy(np.asarray(gt_boxes)).reshape(-1, 4).T
    inter = ((torch.min(b1[2], b2[2]) - torch.max(b1[0], b2[0])).clamp(0)
             * (torch.min(b1[3], b2[3]) - torch.max(b1[1], b2[1])).clamp(0))
    w1, h1 = b1[2] - b1[0], b1[3] - b1[1] + IOU_EPS
    w2, h2 = b2[2] - b2[0], b2[3] - b2[1] + IOU_EPS
    union = w1 * h1 + w2 * h2 - inter + IOU_EPS
    return (inter / union).numpy()


def corloc_hit(box, gt_boxes) -> bool:
    """Whether the box localises the image: IoU >= 0.5 with any ground-truth box (none: a miss)."""
    gt = np.asarray(gt_boxes)
    return bool(gt.size and (box_iou(box, gt) >= CORLOC_IOU).any())
