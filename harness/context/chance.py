"""The chance row: what a guess scores, stated by each protocol from its evaluation data.

A chance "model" has no weights and computes no features: evaluating it asks the protocol
for ``chance_results(data_root)``, which mirrors the records of ``run`` (same datasets,
splits, variants and seeds, so the rows line up in a leaderboard) with chance-level metrics
computed from the evaluation split's labels. The definitions, one per kind of metric:

- top-k accuracy: a uniform random guess over the C classes scores min(k, C) / C, whatever
  the class balance (`uniform_topk`);
- mIoU and pixel accuracy: the expected value of a uniform random per-pixel prediction over
  the C classes, from the ground-truth pixel count n_c of each class in the evaluation split
  (N pixels in all): IoU_c = (n_c / C) / (n_c + N / C - n_c / C), averaged over the classes
  present; pixel accuracy 1 / C (`uniform_segmentation`). The expectation is taken of the
  confusion matrix (the ratio of expectations, exact as the pixel count grows).

A protocol that does not override ``Protocol.chance_results`` keeps the contract's default,
which raises harness.errors.NotApplicable, and the suite skips the pair.
"""
from __future__ import annotations

from typing import Any

import numpy as np
from torch import nn

from harness.models.handle import ModelHandle
from harness.errors import ConfigError
from harness.registry import register_model_source

CHANCE_VERSION = 1  # part of the identity: a change of definition must not reuse records


def uniform_topk(num_classes: int, ks=(1, 5)) -> dict[str, float]:
    """Percent top-k accuracy of a uniform random guess (top-5 only with >= 5 classes, as the
    classification protocols report it)."""
    return {f"top{k}": 100.0 * min(k, num_classes) / num_classes for k in ks if k == 1 or num_classes >= k}


def uniform_segmentation(pixel_counts: np.ndarray, num_classes: int) -> dict[str, Any]:
    """Percent mIoU (classes present) and pixel accuracy of a uniform random per-pixel guess,
    from the per-class ground-truth pixel counts of the evaluation split; ``iou`` per class
    (NaN for a class absent from the ground truth)."""
    n = np.asarray(pixel_counts, dtype=np.float64)
    if n.shape != (num_classes,):
        raise ValueError(f"expected {num_classes} pixel counts, found shape {n.shape}")
    total = n.sum()
    tp = n / num_classes
    with np.errstate(invalid="ignore", divide="ignore"):
        iou = np.where(n > 0, tp / (n + total / num_classes - tp), np.nan)
    present = iou[~np.isnan(iou)]
    return {"mIoU": 100.0 * float(present.mean()) if len(present) else float("nan"),
            "pixel_accuracy": 100.0 / num_classes, "iou": iou}


class ChanceModel(ModelHandle):
    """The chance row of a suite (``models: - {name: chance, chance: {}}``)."""

    def __init__(self, name: str = "chance"):
        super().__init__(name, nn.Identity(), {"method": "chance", "context": "chance",
                                               "identity": f"chance-v{CHANCE_VERSION}"})

    @property
    def cache_key(self) -> str:
        return self.meta["identity"]

    def record_info(self) -> dict[str, Any]:
        return {"name": self.name, "method": "chance", "arch": None, "patch_size": None, "pretrain_data": None,
                "epochs": None, "steps": None, "checkpoint": None, "checkpoint_sha256": None, "init_seed": None,
                "context": "chance", "weights_key": self.cache_key, "reg_tokens": 0, "pos_interp": "official"}


@register_model_source("chance")
def chance_source(spec, ctx) -> ChanceModel:
    """``chance:``: what a guess scores (no weights, no settings)."""
    if spec.options or spec.target:
        raise ConfigError(f"model {spec.name!r}: chance takes no settings (write chance: {{}}), "
                          f"found {spec.describe()}")
    return ChanceModel(spec.name or "chance")
