"""J (region similarity) and F (boundary F-measure) and their statistics as the DAVIS-2017
evaluation computes them (davisvideochallenge/davis2017-evaluation ``davis2017/metrics.py``,
``utils.py`` ``db_statistics``, ``evaluation.py``), in numpy/scipy only.

- J: intersection over union of the binary masks; an empty union counts as 1 (``db_eval_iou``).
- F: 1-pixel boundary maps (``_seg2bmap``: a pixel differs from its right, lower or
  lower-right neighbour), each boundary pixel matched if the other map has a boundary pixel
  within the disk of radius ``ceil(0.008 * diagonal)`` (skimage ``disk`` = x^2 + y^2 <= r^2,
  applied with ``cv2.dilate``: here a nearest-neighbour search over boundary pixels, the same
  set); precision, recall, then their harmonic mean, with the official conventions for empty
  boundaries (``f_measure``).
- Per object: mean, recall (fraction of frames above 0.5) and decay (mean of the first quarter
  of the frames minus that of the last, on the official bins) over the frames evaluated, which
  exclude the first and the last frame (semi-supervised task). The global numbers are means
  over objects, (J&F)m the mean of Jm and Fm.
"""
from __future__ import annotations


import numpy as np
from scipy.spatial import cKDTree


def db_iou(annotation: np.ndarray, segmentation: np.ndarray, void: np.ndarray | None = None) -> np.ndarray | float:
    """J per frame (last two axes are the picture)."""
    a, s = annotation.astype(bool), segmentation.astype(bool)
    keep = np.ones_like(s) if void is None else ~void.astype(bool)
    inter = np.sum((s & a) & keep, axis=(-2, -1))
    union = np.sum((s | a) & keep, axis=(-2, -1))
    with np.errstate(divide="ignore", invalid="ignore"):
        j = inter / union
    if np.ndim(j) == 0:
        return 1.0 if np.isclose(union, 0) else float(j)
    j[np.isclose(union, 0)] = 1
    return j


def boundary_map(seg: np.ndarray) -> np.ndarray:
    """The 1-pixel boundary of a binary mask, offset half a pixel towards the origin."""
    seg = seg.astype(bool)
    e, s, se = np.zeros_like(seg), np.zeros_like(seg), np.zeros_like(seg)
    e[:, :-1] = seg[:, 1:]
    s[:-1, :] = seg[1:, :]
    se[:-1, :-1] = seg[1:, 1:]
    b = (seg ^ e) | (seg ^ s) | (seg ^ se)
    b[-1, :] = seg[-1, :] ^ e[-1, :]
    b[:, -1] = seg[:, -1] ^ s[:, -1]
    b[-1, -1] = False
    return b


def boundary_radius(shape: tuple[int, int], bound_th: float = 0.008) -> float:
    """The matching distance in pixels: ``bound_th`` itself if >= 1, else ceil(bound_th * diagonal)."""
    return float(bound_th) if bound_th >= 1 else float(np.ceil(bound_th * np.linalg.norm(shape)))


def _matched(points: np.ndarray, others: np.ndarray, radius: float) -> int:
    """How many of ``points`` have one of ``others`` at Euclidean distance <= radius: the count
    of ``points`` inside the dilation of ``others`` by the disk x^2 + y^2 <= radius^2."""
    if len(points) == 0 or len(others) == 0:
        return 0
    r2 = int(radius) ** 2
    d, idx = cKDTree(others).query(points, k=1, distance_upper_bound=radius + 1.0)
    ok = np.isfinite(d)
    diff = points[ok] - others[idx[ok]]
    return int(np.sum((diff * diff).sum(axis=1) <= r2))


def f_measure(foreground: np.ndarray, gt: np.ndarray, void: np.ndarray | None = None,
              bound_th: float = 0.008) -> float:
    """F of one frame: the boundary F-measure of ``foreground`` against ``gt`` (binary masks)."""
    keep = np.ones(foreground.shape, bool) if void is None else ~void.astype(bool)
    radius = boundary_radius(foreground.shape, bound_th)
    if radius != int(radius):
        # skimage's disk(r) of a fractional r is a grid of half-integer offsets: not modelled
        raise ValueError(f"bound_th {bound_th} gives a fractional radius {radius}; use a fraction < 1 or an integer")
    fg_b = boundary_map(foreground.astype(bool) & keep)
    gt_b = boundary_map(gt.astype(bool) & keep)
    fg_pts, gt_pts = np.argwhere(fg_b).astype(np.int64), np.argwhere(gt_b).astype(np.int64)
    n_fg, n_gt = len(fg_pts), len(gt_pts)
    if n_fg == 0 and n_gt > 0:
        precision, recall = 1.0, 0.0
    elif n_fg > 0 and n_gt == 0:
        precision, recall = 0.0, 1.0
    elif n_fg == 0 and n_gt == 0:
        precision, recall = 1.0, 1.0
    else:
        precision = _matched(fg_pts, gt_pts, radius) / float(n_fg)
        recall = _matched(gt_pts, fg_pts, radius) / float(n_gt)
    if precision + recall == 0:
        return 0.0
    return 2 * precision * recall / (precision + recall)


def db_boundary(annotation: np.ndarray, segmentation: np.ndarray, void: np.ndarray | None = None,
                bound_th: float = 0.008) -> np.ndarray | float:
    """F per frame of (T, H, W) masks, or of one (H, W) frame."""
    if annotation.ndim == 2:
        return f_measure(segmentation, annotation, void, bound_th)
    return np.array([f_measure(segmentation[t], annotation[t], None if void is None else void[t], bound_th)
                     for t in range(annotation.shape[0])])


def statistics(per_frame: np.ndarray) -> tuple[float, float, float]:
    """(mean, recall, decay) of one object's per-frame values (``db_statistics``): NaNs skipped;
    decay = mean of the first of 4 bins minus the last, bin edges rounded from
    linspace(1, n, 5) - 1 and stored as uint8 as the official code does (bins overlap by one
    frame)."""
    v = np.asarray(per_frame, dtype=np.float64)
    with np.errstate(invalid="ignore"), _quiet():
        mean = float(np.nanmean(v))
        recall = float(np.nanmean(v > 0.5))
        ids = (np.round(np.linspace(1, len(v), 5) + 1e-10) - 1).astype(np.uint8)
        bins = [v[ids[i]:ids[i + 1] + 1] for i in range(4)]
        decay = float(np.nanmean(bins[0]) - np.nanmean(bins[3]))
    return mean, recall, decay


class _quiet:
    def __enter__(self):
        import warnings

        self._w = warnings.catch_warnings()
        self._w.__enter__()
        warnings.simplefilter("ignore", category=RuntimeWarning)

    def __exit__(self, *exc):
        return self._w.__exit__(*exc)


def object_masks(labels: np.ndarray, n_objects: int) -> np.ndarray:
    """(n_objects, T, H, W) bool: object k + 1's mask in each of the (T, H, W) label maps."""
    ids = np.arange(1, n_objects + 1)[:, None, None, None]
    return labels[None] == ids


def evaluate_sequence(gt: np.ndarray, pred: np.ndarray, bound_th: float = 0.008) -> dict[str, np.ndarray]:
    """J and F per object and frame of one sequence (semi-supervised task). ``gt`` and ``pred``:
    (T, H, W) label maps of every frame (void 255 in ``gt`` becomes background, as the official
    reader does); the objects are 1..max(gt[0]); the first and last frames are not evaluated.
    A prediction with a label above the number of objects is an error there (the official
    evaluation stops); ``ValueError`` here. Returns {"J": (n_obj, T - 2), "F": (n_obj, T - 2)}."""
    gt = np.where(gt == 255, 0, gt).astype(np.int64)
    n_obj = int(gt[0].max())
    gt_e, pred_e = gt[1:-1], np.asarray(pred, dtype=np.int64)[1:-1]
    n_pred = int(pred_e.max()) if pred_e.size else 0
    if n_pred > n_obj:
        raise ValueError(f"the segmentation has object index {n_pred} but the first annotation has {n_obj} objects")
    g, p = object_masks(gt_e, n_obj), object_masks(pred_e, n_obj)
    j = np.zeros((n_obj, len(gt_e)))
    f = np.zeros((n_obj, len(gt_e)))
    for k in range(n_obj):
        j[k] = db_iou(g[k], p[k])
        f[k] = db_boundary(g[k], p[k], None, bound_th)
    return {"J": j, "F": f}
