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

from harness.per_image import areas_block, confusion_block, matched_confusion, mean_iou, pixel_accuracy, square_iou


def ignored_class_terms(num_classes: int, num_pred: int, count_ignored_class: bool) -> int:
    """The zero terms the class mean also divides by: one for the ignored class that the bank kept
    as an extra predicted class (``num_pred == num_classes + 1``) when ``count_ignored_class``."""
    return 1 if (count_ignored_class and num_pred == num_classes + 1) else 0


class ConfusionMatrix:
    """Rows = ground-truth classes (``num_classes``), columns = predicted classes
    (``num_pred`` >= ``num_classes``: a bank with an extra "ignored" class can predict it).

    Each update also keeps the image's intersection, union and ground-truth pixel counts per
    real class (``image_areas``): the statistics a bootstrap over the images resamples."""

    def __init__(self, num_classes: int, num_pred: int | None = None, ignore_index: int = 255,
                 keep_image_matrices: bool = False):
        self.num_classes = int(num_classes)
        self.num_pred = int(num_pred if num_pred is not None else num_classes)
        if self.num_pred < self.num_classes:
            raise ValueError(f"num_pred ({self.num_pred}) < num_classes ({self.num_classes})")
        self.ignore_index = ignore_index
        self.matrix = np.zeros((self.num_classes, self.num_pred), dtype=np.int64)
        self.image_areas: list[np.ndarray] = []  # per update: (3, num_classes) intersect, union, label
        # per update, the image's whole matrix: what a resample needs when classes are matched on
        # the summed matrix (Hungarian); kept only then (ADE20K: 150 x 151 counts per image)
        self.image_matrices: list[np.ndarray] | None = [] if keep_image_matrices else None

    def per_image_block(self, *, count_absent_classes: bool, count_ignored_class: bool) -> dict:
        """The record's ``per_image`` block (harness.per_image) of the images seen, with
        compute_miou's class averaging (not defined for Hungarian matching, which needs each
        image's whole confusion matrix)."""
        g = self.num_classes
        areas = (np.stack(self.image_areas) if self.image_areas else np.zeros((0, 3, g), dtype=np.int64))
        return areas_block(areas[:, 0], areas[:, 1], areas[:, 2], count_absent_classes=count_absent_classes,
                           extra_terms=ignored_class_terms(g, self.num_pred, count_ignored_class))

    def confusion_block(self, *, count_absent_classes: bool, count_ignored_class: bool) -> dict:
        """The record's ``per_image`` block under Hungarian matching: each image's matrix (needs
        ``keep_image_matrices``), matched anew on every resample as compute_miou matches the whole set."""
        if self.image_matrices is None:
            raise ValueError("the per-image matrices were not kept (keep_image_matrices=False)")
        g, p = self.num_classes, self.num_pred
        m = np.stack(self.image_matrices) if self.image_matrices else np.zeros((0, g, p), dtype=np.int64)
        return confusion_block(m, hungarian=True, count_absent_classes=count_absent_classes,
                               extra_terms=ignored_class_terms(g, p, count_ignored_class))

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
            if self.image_matrices is not None:
                self.image_matrices.append(np.zeros((g, self.num_pred), dtype=np.int64))
            return
        if gt.max() >= self.num_classes or gt.min() < 0:
            bad = int(gt.max() if gt.max() >= self.num_classes else gt.min())
            raise ValueError(f"ground-truth label {bad} outside [0, {self.num_classes}) "
                             f"and not the ignore index {self.ignore_index}")
        if pred.max() >= self.num_pred or pred.min() < 0:
            raise ValueError(f"prediction outside [0, {self.num_pred})")
        image = np.bincount(gt * self.num_pred + pred, minlength=g * self.num_pred).reshape(g, self.num_pred)
        self.matrix += image
        if self.image_matrices is not None:
            self.image_matrices.append(image.astype(np.int32))  # an image's pixel counts: half the memory
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


def compute_miou(conf: np.ndarray, *, hungarian: bool = False, count_absent_classes: bool = False,
                 count_ignored_class: bool = False) -> MIoUResult:
    """mIoU from a (num_classes, num_pred) confusion matrix.

    ``count_ignored_class`` only has an effect when ``num_pred == num_classes + 1`` (the
    bank kept the ignored label as an extra class, open-hummingbird-eval's ADE20K "other"):
    the mean then has one more term, always 0, since no ground-truth pixel is of that class.
    """
    conf = np.asarray(conf, dtype=np.int64)
    g, p = conf.shape
    # the same steps as a bootstrap resample's (harness.per_image, kind confusion)
    square, mapping = matched_confusion(conf, hungarian)
    real = square_iou(square)[:g]
    extra = ignored_class_terms(g, p, count_ignored_class)
    miou = mean_iou(real, count_absent_classes=count_absent_classes, extra_terms=extra)
    n = (g if count_absent_classes else int((~np.isnan(real)).sum())) + extra
    acc = float(pixel_accuracy(np.diag(conf[:, :g]), conf.sum(1)))
    return MIoUResult(miou=miou, iou=real, pixel_accuracy=acc, mapping=mapping, n_classes_averaged=n)
