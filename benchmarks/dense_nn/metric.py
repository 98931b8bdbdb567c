"""Segmentation metric of the dense NN protocol: one dataset-level confusion matrix
(np.bincount, streamed image by image) and mIoU with the open-hummingbird-eval quirks
behind flags.

Plain mIoU (the default) is the mmsegmentation definition: IoU per class from the
dataset's confusion matrix, classes absent from both ground truth and prediction are
left out of the mean. The three flags reproduce `hbird/utils/eval_metrics.py`
(`PredsmIoU.compute`) of open-hummingbird-eval v2.0.0:

- ``hungarian``: predicted classes are re-matched to ground-truth classes by a Hungarian
  assignment on the IoU matrix (`PredsmIoU._hungarian_mapping`), which can only raise
  the number;
- ``count_absent_classes``: the mean runs over every class, an absent class counting
  as IoU 0 (`PredsmIoU._miou_from_counts` divides by ``num_gt_classes``);
- ``count_ignored_class``: ADE20K there is averaged over 151 classes, the ignored
  "other" class 0 included with IoU 0 (`Ade20kDataModule.get_num_classes` = 151 with
  ``ignore_index`` 0).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from harness.per_image import areas_block, iou_per_class, mean_iou, pixel_accuracy


class ConfusionMatrix:
    """Rows = ground-truth classes (``num_classes``), columns = predicted classes
    (``num_pred`` >= ``num_classes``: a bank with an extra "ignored" class can predict it).

    Each update also keeps the image's intersection, union and ground-truth pixel counts per
    real class (``image_areas``): the statistics a bootstrap over the images resamples."""

    def __init__(self, num_classes: int, num_pred: int | None = None, ignore_index: int = 255):
        self.num_classes = int(num_classes)
        self.num_pred = int(num_pred if num_pred is not None else num_classes)
        if self.num_pred < self.num_classes:
            raise ValueError(f"num_pred ({self.num_pred}) < num_classes ({self.num_classes})")
        self.ignore_index = ignore_index
        self.matrix = np.zeros((self.num_classes, self.num_pred), dtype=np.int64)
        self.image_areas: list[np.ndarray] = []  # per update: (3, num_classes) intersect, union, label

    def per_image_block(self, *, count_absent_classes: bool, count_ignored_class: bool) -> dict:
        """The record's ``per_image`` block (harness.per_image) of the images seen, with
        compute_miou's class averaging (not defined for Hungarian matching, which needs each
        image's whole confusion matrix)."""
        g = self.num_classes
        areas = (np.stack(self.image_areas) if self.image_areas else np.zeros((0, 3, g), dtype=np.int64))
        return areas_block(areas[:, 0], areas[:, 1], areas[:, 2], count_absent_classes=count_absent_classes,
                           extra_terms=1 if (count_ignored_class and self.num_pred == g + 1) else 0)

    def update(self, gt: np.ndarray, pred: np.ndarray) -> None:
        if gt.shape != pred.shape:
            raise ValueError(f"ground truth {gt.shape} and prediction {pred.shape} differ in shape")
        gt = gt.reshape(-1).astype(np.int64, copy=False)
        pred = pred.reshape(-1).astype(np.int64, copy=False)
        valid = gt != self.ignore_index
        gt, pred = gt[valid], pred[valid]
        g = self.num_classes
        if gt.size == 0:
            self.image_areas.append(np.zeros((3, g), dtype=np.int64))
            return
        if gt.max() >= self.num_classes or gt.min() < 0:
            bad = int(gt.max() if gt.max() >= self.num_classes else gt.min())
            raise ValueError(f"ground-truth label {bad} outside [0, {self.num_classes}) "
                             f"and not the ignore index {self.ignore_index}")
        if pred.max() >= self.num_pred or pred.min() < 0:
            raise ValueError(f"prediction outside [0, {self.num_pred})")
        image = np.bincount(gt * self.num_pred + pred, minlength=g * self.num_pred).reshape(g, self.num_pred)
        self.matrix += image
        intersect = np.diag(image[:, :g])
        label = image.sum(1)
        self.image_areas.append(np.stack([intersect, label + image.sum(0)[:g] - intersect, label]))


@dataclass
class MIoUResult:
    miou: float                 # in [0, 1]
    iou: np.ndarray             # (num_classes,) per real class, NaN where absent (plain)
    pixel_accuracy: float       # identity mapping, over non-ignored pixels
    mapping: np.ndarray | None  # pred class -> gt class (Hungarian), else None
    n_classes_averaged: int


def _iou_table(conf: np.ndarray) -> np.ndarray:
    """IoU per row class of a square confusion matrix; NaN where the union is empty."""
    return iou_per_class(np.diag(conf), conf.sum(1) + conf.sum(0) - np.diag(conf))


def hungarian_mapping(conf: np.ndarray) -> np.ndarray:
    """pred -> gt mapping maximising the summed IoU (square ``conf``), as in
    open-hummingbird-eval `PredsmIoU._hungarian_mapping` (linear_sum_assignment on 1 - IoU)."""
    from scipy.optimize import linear_sum_assignment

    c = conf.astype(np.float64)
    denom = c.sum(1, keepdims=True) + c.sum(0, keepdims=True) - c
    iou = c / np.maximum(denom, 1e-8)
    rows, cols = linear_sum_assignment(1.0 - iou)
    mapping = np.zeros(conf.shape[1], dtype=np.int64)  # unmatched -> 0, as the reference does
    mapping[cols] = rows
    return mapping


def compute_miou(conf: np.ndarray, *, hungarian: bool = False, count_absent_classes: bool = False,
                 count_ignored_class: bool = False) -> MIoUResult:
    """mIoU from a (num_classes, num_pred) confusion matrix.

    ``count_ignored_class`` only has an effect when ``num_pred == num_classes + 1`` (the
    bank kept the ignored label as an extra class, open-hummingbird-eval's ADE20K "other"):
    the mean then has one more term, always 0, since no ground-truth pixel is of that class.
    """
    conf = np.asarray(conf, dtype=np.int64)
    g, p = conf.shape
    if p not in (g, g + 1):
        raise ValueError(f"confusion matrix must be (C, C) or (C, C+1), found {conf.shape}")
    k = p
    square = np.zeros((k, k), dtype=np.int64)
    square[:g] = conf  # the extra row (ground truth never has the extra class) stays 0
    mapping = None
    if hungarian:
        mapping = hungarian_mapping(square)
        folded = np.zeros_like(square)
        np.add.at(folded.T, mapping, square.T)  # folded[:, mapping[j]] += square[:, j]
        square = folded
    iou = _iou_table(square)
    real = iou[:g]
    extra = 1 if (count_ignored_class and p == g + 1) else 0
    miou = mean_iou(real, count_absent_classes=count_absent_classes, extra_terms=extra)
    n = (g if count_absent_classes else int((~np.isnan(real)).sum())) + extra
    acc = float(pixel_accuracy(np.diag(conf[:, :g]), conf.sum(1)))
    return MIoUResult(miou=miou, iou=real, pixel_accuracy=acc, mapping=mapping, n_classes_averaged=n)
