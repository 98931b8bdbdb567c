"""Per-evaluation-image statistics: what a record keeps so that its metric can be recomputed on
a resample of the evaluation images (harness.results.bootstrap), and the metric computations
both the protocols and the resamples use, so that the two cannot drift apart.

A record's ``per_image`` block is of one registered kind (:func:`register_kind`):

- ``hits``: one 0/1 column per accuracy metric (``top1``, ``top5``) and one row per evaluation
  image; the metric is hits * 100.0 / images, as DINO's scripts count it (``accuracy_percent``);
- ``areas``: per image and per class the intersection, union and ground-truth pixel counts of a
  segmentation (mmseg's ``area_intersect`` / ``area_union`` / ``area_label``); the metrics are
  mIoU and pixel accuracy of the counts summed over the images (``iou_per_class``, ``mean_iou``,
  ``pixel_accuracy``), with the protocol's class averaging (``count_absent_classes``:
  a class absent from ground truth and prediction counts as 0 instead of being left out;
  ``extra_terms``: zero terms the mean also divides by, open-hummingbird-eval's ignored class);
- ``confusion``: each image's confusion matrix, where the classes are matched on the whole set;
- ``means``: one value per image, query or sequence; the metric is their mean times a scale;
- ``ratios``: per image a numerator and a denominator; the metric is the ratio of their sums
  (its square root for an RMSE over pixels).

A protocol with a statistic none of these computes registers its own kind in its folder and names
the module in its declaration (``per_image_kinds``).

The block is data about the measurement, never a setting: no fingerprint, record key or cache
key reads it. Arrays are stored as ``{"dtype", "shape", "data"}`` with ``data`` the
zlib-compressed little-endian bytes in base64 (counts as the narrowest unsigned integers, mostly
zeros for areas; values as float32 or float64).
"""
from __future__ import annotations

import base64
import binascii
import zlib
from typing import Any

import numpy as np

HITS = "hits"
AREAS = "areas"
CONFUSION = "confusion"
MEANS = "means"
RATIOS = "ratios"
AREA_PARTS = ("intersect", "union", "label")  # the three counts of an ``areas`` block, in stored order


class PerImageError(ValueError):
    """A ``per_image`` block that cannot be read (corrupted, truncated, of an unknown kind)."""


# ----------------------------------------------------------------------------- arrays <-> JSON
def encode_array(array: np.ndarray) -> dict[str, Any]:
    """An array as JSON: non-negative integers in the narrowest unsigned dtype that holds them,
    floating-point values as float32 or float64 (as given); its shape; its bytes zlib-compressed
    in base64."""
    a = np.asarray(array)
    if np.issubdtype(a.dtype, np.floating):
        dtype = np.float32 if a.dtype == np.float32 else np.float64
        if a.size and not np.isfinite(a).all():
            raise ValueError("per-image statistics are finite numbers, found NaN or infinity")
    else:
        integral = a.dtype == bool or np.issubdtype(a.dtype, np.integer)
        if not integral or (a.size and a.min() < 0):
            raise ValueError(f"per-image counts are non-negative integers, found dtype {a.dtype}")
        top = int(a.max()) if a.size else 0
        dtype = next(d for d in (np.uint8, np.uint16, np.uint32, np.uint64) if top <= np.iinfo(d).max)
    raw = np.ascontiguousarray(a, dtype=np.dtype(dtype).newbyteorder("<")).tobytes()
    return {"dtype": np.dtype(dtype).name, "shape": list(a.shape),
            "data": base64.b64encode(zlib.compress(raw, 6)).decode("ascii")}


def decode_array(block: Any) -> np.ndarray:
    """The array of :func:`encode_array`; a block that does not decode to its stated dtype and
    shape is a PerImageError saying what is wrong."""
    if not isinstance(block, dict) or not {"dtype", "shape", "data"} <= set(block):
        raise PerImageError(f"expected an array block with dtype, shape and data, found {_short(block)}")
    try:
        dtype = np.dtype(block["dtype"])
        shape = tuple(int(s) for s in block["shape"])
        raw = zlib.decompress(base64.b64decode(block["data"], validate=True))
    except (TypeError, ValueError, binascii.Error, zlib.error) as exc:
        raise PerImageError(f"array block does not decode ({type(exc).__name__}: {exc})") from None
    if dtype.kind not in "ubf" or len(raw) != dtype.itemsize * int(np.prod(shape, dtype=np.int64)):
        raise PerImageError(f"array block holds {len(raw)} bytes, not {shape} of {dtype}")
    return np.frombuffer(raw, dtype=dtype.newbyteorder("<")).reshape(shape)


def _short(x: Any) -> str:
    text = repr(x)
    return text if len(text) <= 80 else text[:77] + "..."


# ----------------------------------------------------------------------------- building blocks
def hits_block(hits: dict[str, np.ndarray]) -> dict[str, Any]:
    """The ``per_image`` block of accuracy metrics: {metric: (N,) bool per image}."""
    names = list(hits)
    flags = np.stack([np.asarray(hits[m], dtype=bool) for m in names], axis=1)
    return {"kind": HITS, "metrics": names, "images": int(flags.shape[0]), "hits": encode_array(flags)}


def areas_block(intersect: np.ndarray, union: np.ndarray, label: np.ndarray, *, count_absent_classes: bool,
                extra_terms: int, accuracy_metric: str = "pixel_accuracy",
                class_accuracy_metric: str | None = None) -> dict[str, Any]:
    """The ``per_image`` block of a segmentation: (N, C) intersection, union and ground-truth
    pixel counts per image and class, and the class averaging of the protocol's mIoU.
    ``accuracy_metric``: the name the protocol's records give the pixel accuracy (mmseg: aAcc);
    ``class_accuracy_metric``: the name of the mean over classes of each class's accuracy (mmseg:
    mAcc; classes without ground-truth pixels left out), when the records have it."""
    stacked = np.stack([np.asarray(a) for a in (intersect, union, label)], axis=1)  # (N, 3, C)
    block = {"kind": AREAS, "metrics": ["mIoU", accuracy_metric], "accuracy_metric": accuracy_metric,
             "images": int(stacked.shape[0]), "count_absent_classes": bool(count_absent_classes),
             "extra_terms": int(extra_terms), "areas": encode_array(stacked)}
    if class_accuracy_metric:
        block["metrics"].append(class_accuracy_metric)
        block["class_accuracy_metric"] = class_accuracy_metric
    return block


def confusion_block(matrices: np.ndarray, *, hungarian: bool, count_absent_classes: bool,
                    extra_terms: int) -> dict[str, Any]:
    """The ``per_image`` block of a segmentation whose mIoU is not a sum of per-image areas (its
    classes are matched on the whole set, :func:`matched_confusion`): each image's (C, P)
    confusion matrix (ground truth x prediction) and the class averaging."""
    m = np.asarray(matrices)
    if m.ndim != 3:
        raise ValueError(f"expected (images, classes, predicted classes) counts, found shape {m.shape}")
    return {"kind": CONFUSION, "metrics": ["mIoU", "pixel_accuracy"], "images": int(m.shape[0]),
            "hungarian": bool(hungarian), "count_absent_classes": bool(count_absent_classes),
            "extra_terms": int(extra_terms), "confusion": encode_array(m)}


def means_block(values: dict[str, np.ndarray], *, scale: float = 1.0) -> dict[str, Any]:
    """The ``per_image`` block of metrics that are ``scale`` times a mean over images (or queries,
    sequences): {metric: (N,) finite values}."""
    names = list(values)
    stacked = np.stack([np.asarray(values[m], dtype=np.float64) for m in names], axis=1)
    return {"kind": MEANS, "metrics": names, "images": int(stacked.shape[0]), "scale": float(scale),
            "values": encode_array(stacked)}


def ratios_block(numerators: dict[str, np.ndarray], denominators: dict[str, np.ndarray], *,
                 scale: dict[str, float] | None = None, root: dict[str, bool] | None = None) -> dict[str, Any]:
    """The ``per_image`` block of metrics that are a ratio of sums over images: per metric (N,)
    numerators and denominators; ``scale`` (default 1) and ``root`` (default False) per metric."""
    names = list(numerators)
    if set(denominators) != set(names):
        raise ValueError(f"numerators for {names}, denominators for {list(denominators)}")
    num = np.stack([np.asarray(numerators[m], dtype=np.float64) for m in names], axis=1)
    den = np.stack([np.asarray(denominators[m], dtype=np.float64) for m in names], axis=1)
    return {"kind": RATIOS, "metrics": names, "images": int(num.shape[0]),
            "scale": [float((scale or {}).get(m, 1.0)) for m in names],
            "root": [bool((root or {}).get(m, False)) for m in names],
            "numerators": encode_array(num), "denominators": encode_array(den)}


# ----------------------------------------------------------------------------- the metrics
def hungarian_mapping(conf: np.ndarray) -> np.ndarray:
    """pred -> gt mapping maximising the summed IoU (square ``conf``), as in
    open-hummingbird-eval `PredsmIoU._hungarian_mapping` (linear_sum_assignment on 1 - IoU)."""
    from scipy.optimize import linear_sum_assignment

    c = np.asarray(conf).astype(np.float64)
    denom = c.sum(1, keepdims=True) + c.sum(0, keepdims=True) - c
    iou = c / np.maximum(denom, 1e-8)
    rows, cols = linear_sum_assignment(1.0 - iou)
    mapping = np.zeros(c.shape[1], dtype=np.int64)  # unmatched -> 0, as the reference does
    mapping[cols] = rows
    return mapping


def matched_confusion(conf: np.ndarray, hungarian: bool) -> tuple[np.ndarray, np.ndarray | None]:
    """(square, mapping): a (C, C) or (C, C + 1) confusion matrix made square (the extra row, a
    class no ground truth has, all 0), its predicted classes folded onto the ground-truth class
    the Hungarian mapping gives each (``hungarian``; mapping None otherwise)."""
    conf = np.asarray(conf)
    g, p = conf.shape
    if p not in (g, g + 1):
        raise ValueError(f"confusion matrix must be (C, C) or (C, C+1), found {conf.shape}")
    square = np.zeros((p, p), dtype=conf.dtype)
    square[:g] = conf
    if not hungarian:
        return square, None
    mapping = hungarian_mapping(square)
    folded = np.zeros_like(square)
    np.add.at(folded.T, mapping, square.T)  # folded[:, mapping[j]] += square[:, j]
    return folded, mapping


def square_iou(square: np.ndarray) -> np.ndarray:
    """IoU per row class of a square confusion matrix; NaN where the union is empty."""
    d = np.diag(square)
    return iou_per_class(d, square.sum(1) + square.sum(0) - d)


def accuracy_percent(hits, total: int):
    """Hits in percent of ``total`` (DINO: count * 100.0 / total); hits a count or an array."""
    return hits * 100.0 / total


def iou_per_class(intersect: np.ndarray, union: np.ndarray) -> np.ndarray:
    """IoU per class (last axis); NaN where the union is empty."""
    tp = np.asarray(intersect).astype(np.float64)
    union = np.asarray(union)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(union > 0, tp / np.maximum(union, 1), np.nan)


def mean_iou(iou: np.ndarray, *, count_absent_classes: bool = False, extra_terms: int = 0) -> float:
    """The mean of one (C,) IoU vector: classes with NaN IoU left out, or counted as 0 with
    ``count_absent_classes``; ``extra_terms`` zero terms more in the denominator."""
    iou = np.asarray(iou)
    terms = np.nan_to_num(iou, nan=0.0) if count_absent_classes else iou[~np.isnan(iou)]
    n = len(terms) + extra_terms
    return float(terms.sum() / n) if n else float("nan")


def mean_iou_rows(iou: np.ndarray, *, count_absent_classes: bool = False, extra_terms: int = 0) -> np.ndarray:
    """:func:`mean_iou` of each row of a (B, C) array, to the last bit: the rows with the same
    number of terms are summed together as one (rows, terms) array, whose row sums numpy computes
    exactly as the sum of each row alone (the same pairwise summation over the same terms)."""
    iou = np.asarray(iou, dtype=np.float64)
    if count_absent_classes:
        n = iou.shape[1] + extra_terms
        return np.nan_to_num(iou, nan=0.0).sum(1) / n if n else np.full(iou.shape[0], np.nan)
    valid = ~np.isnan(iou)
    counts = valid.sum(1)
    compact = np.take_along_axis(iou, np.argsort(~valid, axis=1, kind="stable"), axis=1)  # valid first, in order
    out = np.full(iou.shape[0], np.nan)
    for k in np.unique(counts):
        if k + extra_terms:
            rows = counts == k
            out[rows] = compact[rows, :k].sum(1) / (k + extra_terms)
    return out


def pixel_accuracy(intersect, label):
    """Correct pixels over labelled pixels (sums over classes, the last axis); NaN without any."""
    correct, total = np.asarray(intersect).sum(-1), np.asarray(label).sum(-1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(total > 0, correct / np.where(total > 0, total, 1), np.nan)


# ----------------------------------------------------------------------------- read and resample
class PerImageStats:
    """A decoded ``per_image`` block of one kind: ``rows`` (N, K) numbers whose weighted sums over
    images (:meth:`metrics_of_sums`) give the block's metrics exactly as the protocol computes
    them from the whole set. Each kind is a subclass registered with :func:`register_kind`; a
    protocol with a statistic of its own registers its kind in its folder and names the module in
    its declaration (``per_image_kinds``), so the bootstrap reads it without this file knowing it."""

    kind: str = "?"

    def __init__(self, block: dict):
        self.metrics = [str(m) for m in block.get("metrics") or []]
        self.rows = self.read_rows(block)
        stated = block.get("images")
        if stated is not None and int(stated) != self.rows.shape[0]:
            raise PerImageError(f"per_image block states {stated} images but holds {self.rows.shape[0]}")

    def read_rows(self, block: dict) -> np.ndarray:
        raise NotImplementedError

    @property
    def images(self) -> int:
        return int(self.rows.shape[0])

    def metrics_of_sums(self, sums: np.ndarray, metric: str) -> np.ndarray:
        """``metric`` for each row of ``sums`` (B, K): the statistics summed over (resampled) images."""
        if metric not in self.metrics:
            raise KeyError(metric)
        return self.metric_of(np.asarray(sums, dtype=np.float64), metric)

    def metric_of(self, sums: np.ndarray, metric: str) -> np.ndarray:
        raise NotImplementedError

    def metric_of_weights(self, weights: np.ndarray, metric: str) -> np.ndarray:
        """``metric`` of each resample given as (B, N) image counts (a row of ones: the whole set)."""
        sums = np.asarray(weights, dtype=np.float64) @ self.rows.astype(np.float64)
        return self.metrics_of_sums(sums, metric)


_KINDS: dict[str, type[PerImageStats]] = {}


def register_kind(name: str):
    """Class decorator: ``name`` is read by this PerImageStats subclass."""
    def decorator(cls: type[PerImageStats]) -> type[PerImageStats]:
        if name in _KINDS and _KINDS[name] is not cls:
            raise ValueError(f"per-image kind {name!r} is registered twice")
        cls.kind = name
        _KINDS[name] = cls
        return cls

    return decorator


def known_kinds() -> list[str]:
    return sorted(set(_KINDS) | set(_declared_kind_modules()))


def _declared_kind_modules() -> dict[str, str]:
    from harness.registry import protocol_declarations

    out: dict[str, str] = {}
    for d in protocol_declarations().values():
        out.update(d.per_image_kinds)
    return out


def _kind_class(kind) -> type[PerImageStats]:
    if kind not in _KINDS:
        module = _declared_kind_modules().get(kind) if isinstance(kind, str) else None
        if module is not None:
            import importlib

            importlib.import_module(module)
    if kind not in _KINDS:
        raise PerImageError(f"per_image block of kind {kind!r}; known kinds: {', '.join(known_kinds())}")
    return _KINDS[kind]


@register_kind(HITS)
class HitsStats(PerImageStats):
    """One 0/1 column per accuracy metric; the metric is hits * 100 / images."""

    def read_rows(self, block):
        flags = decode_array(block.get("hits"))
        if flags.ndim != 2 or flags.shape[1] != len(self.metrics):
            raise PerImageError(f"hits array of shape {flags.shape} for metrics {self.metrics}")
        return flags.astype(np.int64)

    def metric_of(self, sums, metric):
        return accuracy_percent(sums[:, self.metrics.index(metric)], self.images)


@register_kind(CONFUSION)
class ConfusionStats(PerImageStats):
    """Each image's confusion matrix; classes matched on each (resampled) sum."""

    def read_rows(self, block):
        conf = decode_array(block.get("confusion"))
        if conf.ndim != 3 or conf.shape[2] not in (conf.shape[1], conf.shape[1] + 1):
            raise PerImageError(f"confusion array of shape {conf.shape}, expected (images, C, C or C + 1)")
        self.shape = conf.shape[1:]
        self.hungarian = bool(block.get("hungarian", False))
        self.count_absent_classes = bool(block.get("count_absent_classes", False))
        self.extra_terms = int(block.get("extra_terms", 0))
        return conf.reshape(conf.shape[0], -1).astype(np.int64)

    def metric_of(self, sums, metric):
        """Pixel accuracy with the identity mapping, mIoU after matching the classes on each
        summed matrix (every resample matched anew)."""
        g, _ = self.shape
        confs = sums.reshape(sums.shape[0], *self.shape)
        if metric == "pixel_accuracy":
            diag = np.diagonal(confs[:, :, :g], axis1=1, axis2=2)
            return 100.0 * pixel_accuracy(diag, confs.sum(2))
        out = np.empty(sums.shape[0])
        for b, conf in enumerate(confs):
            square, _ = matched_confusion(conf, self.hungarian)
            out[b] = 100.0 * mean_iou(square_iou(square)[:g], count_absent_classes=self.count_absent_classes,
                                      extra_terms=self.extra_terms)
        return out


@register_kind(AREAS)
class AreasStats(PerImageStats):
    """Intersection and union of each class, then each image's correct and labelled pixels."""

    def read_rows(self, block):
        areas = decode_array(block.get("areas"))
        if areas.ndim != 3 or areas.shape[1] != len(AREA_PARTS):
            raise PerImageError(f"areas array of shape {areas.shape}, expected (images, 3, classes)")
        self.classes = areas.shape[2]
        self.count_absent_classes = bool(block.get("count_absent_classes", False))
        self.accuracy_metric = str(block.get("accuracy_metric", "pixel_accuracy"))
        self.class_accuracy_metric = block.get("class_accuracy_metric")
        self.extra_terms = int(block.get("extra_terms", 0))
        intersect, union, label = (areas[:, i].astype(np.int64) for i in range(3))
        return np.concatenate([intersect, union, intersect.sum(1, keepdims=True),
                               label.sum(1, keepdims=True), label], axis=1)

    def metric_of(self, sums, metric):
        c = self.classes
        if metric == self.accuracy_metric:
            return 100.0 * pixel_accuracy(sums[:, 2 * c:2 * c + 1], sums[:, 2 * c + 1:2 * c + 2])
        if metric == self.class_accuracy_metric:  # correct over labelled pixels per class, their mean
            return 100.0 * mean_iou_rows(iou_per_class(sums[:, :c], sums[:, 2 * c + 2:]))
        iou = iou_per_class(sums[:, :c], sums[:, c:2 * c])
        return 100.0 * mean_iou_rows(iou, count_absent_classes=self.count_absent_classes,
                                     extra_terms=self.extra_terms)


@register_kind(MEANS)
class MeansStats(PerImageStats):
    """One value per image (or query, or sequence) and metric; the metric is ``scale`` times
    their mean (mean average precision over queries, J over sequences, a per-image RMSE averaged
    over images)."""

    def read_rows(self, block):
        values = decode_array(block.get("values"))
        if values.ndim != 2 or values.shape[1] != len(self.metrics):
            raise PerImageError(f"values array of shape {values.shape} for metrics {self.metrics}")
        self.scale = float(block.get("scale", 1.0))
        return values.astype(np.float64)

    def metric_of(self, sums, metric):
        return self.scale * sums[:, self.metrics.index(metric)] / self.images


@register_kind(RATIOS)
class RatiosStats(PerImageStats):
    """Per image and metric a numerator and a denominator; the metric is ``scale`` times the
    ratio of their sums, its square root where ``root`` says so (correct keypoints over
    keypoints; an RMSE over all pixels: sqrt(sum of squared errors / pixels))."""

    def read_rows(self, block):
        num, den = decode_array(block.get("numerators")), decode_array(block.get("denominators"))
        m = len(self.metrics)
        if num.shape != den.shape or num.ndim != 2 or num.shape[1] != m:
            raise PerImageError(f"numerators {num.shape} and denominators {den.shape} for metrics {self.metrics}")
        self.scale = [float(x) for x in block.get("scale", [1.0] * m)]
        self.root = [bool(x) for x in block.get("root", [False] * m)]
        if len(self.scale) != m or len(self.root) != m:
            raise PerImageError(f"scale and root need one entry per metric ({m})")
        return np.concatenate([num, den], axis=1).astype(np.float64)

    def metric_of(self, sums, metric):
        i, m = self.metrics.index(metric), len(self.metrics)
        with np.errstate(invalid="ignore", divide="ignore"):
            ratio = np.where(sums[:, m + i] > 0, sums[:, i] / np.where(sums[:, m + i] > 0, sums[:, m + i], 1), np.nan)
        return self.scale[i] * (np.sqrt(ratio) if self.root[i] else ratio)


def read_per_image(block: Any) -> PerImageStats:
    """The statistics of a record's ``per_image`` block; any block that does not read as one of
    the known kinds is a PerImageError saying why."""
    if not isinstance(block, dict):
        raise PerImageError(f"per_image block of kind {type(block).__name__!r}; "
                            f"known kinds: {', '.join(known_kinds())}")
    cls = _kind_class(block.get("kind"))
    try:
        return cls(block)
    except PerImageError:
        raise
    except (TypeError, ValueError, KeyError, AttributeError, IndexError) as exc:
        raise PerImageError(f"per_image block does not read ({type(exc).__name__}: {exc})") from None


__all__ = ["HITS", "AREAS", "CONFUSION", "MEANS", "RATIOS", "PerImageError", "PerImageStats", "register_kind",
           "known_kinds", "read_per_image", "means_block", "ratios_block", "encode_array",
           "decode_array", "hits_block", "areas_block", "confusion_block", "hungarian_mapping", "matched_confusion",
           "square_iou", "accuracy_percent", "iou_per_class", "mean_iou", "mean_iou_rows", "pixel_accuracy"]
