"""Logistic regression on frozen features (bytedance/ibot evaluation/eval_logistic_regression.py).

Features as the script extracts them (``extract_feature_pipeline``): train and val through
Resize(256, bicubic) -> CenterCrop(224) -> ImageNet normalisation; ``get_intermediate_layers``
(final-normed tokens) of the last ``n_last_blocks`` blocks (default 1); ``avgpool_patchtokens`` 0 =
CLS (the default), 1 = mean of the patch tokens, 2 = CLS then that mean; then L2-normalised
(``nn.functional.normalize(dim=1, p=2)``). One cyanure multiclass logistic regression per lambda of
``lambdas`` (the script's ``--lr_lambd`` default [0.01, 0.1, 1], lambda unscaled), each its own
result (a sweep variant); top-1 = cyanure's score in percent (benchmarks.logreg.solver).
The script leaves choosing a lambda to its reader, who reads them on the evaluation split; with
``selection_holdout`` (harness.data.holdout) one more result says which lambda a holdout of the
training split chooses (fits on the rest) and that lambda's number from the fit on every training image.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import numpy as np
import torch.nn.functional as F

from harness.probes.labelled_features import feature_for, load_splits
from harness.data.holdout import SelectionHoldoutSetting, carve
from harness.data.subsets import TrainSubsetSetting
from harness.data.transforms import ResizeCenterCrop
from harness.errors import ConfigError, DataError
from harness.features.extract import extract_features
from harness.models.handle import ModelHandle
from harness.per_image import accuracy_percent, hits_block
from harness.presets import load_presets
from harness.protocol import Protocol, ProtocolResult
from harness.registry import register_protocol

from benchmarks.logreg.solver import fit_sweep, require_cyanure

_FEATURE = {0: "cls", 1: "avgpool", 2: "cls+avgpool"}  # iBOT --avgpool_patchtokens


@dataclass
class LogRegConfig:
    dataset: str = "imagenet"
    train_split: str = "train"
    val_split: str = "val"
    resize: int = 256
    crop: int = 224
    interpolation: Literal["bicubic", "bilinear"] = "bicubic"
    n_last_blocks: int = 1
    avgpool_patchtokens: int = 0
    # a named training subset (harness.data.subsets: imagenet_1pct / imagenet_10pct, or a
    # list file); its content hash is in the fingerprint, the setting itself is not
    train_subset: str = ""
    # a fraction of every training class held out to choose lambda on (0 = off); with its seed, in the
    # fingerprint when on
    selection_holdout: float = 0.0
    selection_seed: int = 0
    lambdas: list[float] = field(default_factory=lambda: [0.01, 0.1, 1.0])
    epochs: int = 100  # --epochs -> max_epochs
    it0: int = 10  # --it0: epochs between duality-gap checks
    tol: float = 1e-3
    seed: int = 0
    threads: int = -1  # cyanure's OpenMP threads (-1: all)
    precision: Literal["fp32", "fp16", "bf16"] = "fp32"
    batch_size: int = 64
    num_workers: int = 0
    cache: bool = True
    progress: bool = True

    def __post_init__(self):
        if self.avgpool_patchtokens not in _FEATURE:
            raise ValueError(f"avgpool_patchtokens must be 0, 1 or 2 (iBOT), found {self.avgpool_patchtokens}")
        if not self.lambdas or min(self.lambdas) <= 0 or len(set(self.lambdas)) != len(self.lambdas):
            raise ValueError(f"lambdas must be distinct positive numbers, found {self.lambdas}")
        if not 0.0 <= self.selection_holdout < 1.0:
            raise ValueError(f"selection_holdout must be in [0, 1), found {self.selection_holdout}")
        if self.epochs < 1 or self.it0 < 1 or self.n_last_blocks < 1 or self.crop > self.resize:
            raise ValueError("need epochs, it0, n_last_blocks >= 1 and crop <= resize")


@register_protocol("logreg")
class LogRegProtocol(SelectionHoldoutSetting, TrainSubsetSetting, Protocol):
    """One ProtocolResult per lambda, variant {"lambda", "feature"}; with a holdout one more,
    variant {"selection": "holdout best", "feature"}."""

    Config = LogRegConfig
    CONFORMANCE_RUN = ("synth", {"dataset": "imagefolder", "cache": False, "progress": False}, "imagenet")
    # lambdas: each lambda is its own result, so the sweep list changes no number
    NOT_IN_FINGERPRINT = ("lambdas", "train_subset", "selection_holdout", "selection_seed", "threads", "batch_size",
                          "num_workers", "cache", "progress")
    PRESETS = load_presets("logreg", Path(__file__).parent / "presets")
    DEFAULT_PRESET = "ibot"

    def transform(self) -> ResizeCenterCrop:
        c = self.cfg
        return ResizeCenterCrop(resize=c.resize, crop=c.crop, interpolation=c.interpolation)

    def features(self, model: ModelHandle, data_root: Path):
        """(splits, train features, val features): float32, L2-normalised as the script does."""
        c = self.cfg
        splits = load_splits(c.dataset, data_root, c.train_split, c.val_split)
        self.restrict_train(splits)
        kw = dict(n_last_blocks=c.n_last_blocks, final_norm=True, batch_size=c.batch_size, num_workers=c.num_workers,
                  cache=c.cache, progress=c.progress, precision=c.precision)
        out = []
        for split, source in (("train", splits.train), ("val", splits.val)):
            fs = extract_features(model, source, self.transform(), desc=f"logreg {split}", **kw)
            x = feature_for(_FEATURE[c.avgpool_patchtokens], fs.cls, fs.patch_mean, c.n_last_blocks)
            out.append((F.normalize(x.float(), dim=1, p=2).numpy().astype(np.float32), fs.from_cache))
        return splits, out[0], out[1]

    def chance_results(self, data_root: Path) -> list[ProtocolResult]:
        """The chance row's records (harness.context.chance): a uniform guess, per lambda."""
        from harness.context.chance import uniform_topk

        c = self.cfg
        splits = load_splits(c.dataset, data_root, c.train_split, c.val_split)
        return [ProtocolResult(metrics={"top1": uniform_topk(splits.num_classes, ks=(1,))["top1"]}, dataset=c.dataset,
                               split=c.val_split, seed=None,
                               variant={"lambda": lambd, "feature": _FEATURE[c.avgpool_patchtokens]},
                               params={"chance": "uniform random guess", "num_classes": splits.num_classes,
                                       "n_val": len(splits.val)})
                for lambd in c.lambdas]

    def run(self, model: ModelHandle, data_root: Path) -> list[ProtocolResult]:
        c = self.cfg
        require_cyanure()  # before any work: one error line where it is missing
        patch = int(model.backbone.patch_size)
        if c.crop % patch:
            raise ConfigError(f"crop {c.crop} is not a multiple of the model's patch size {patch}")
        t0 = time.perf_counter()
        splits, (train_x, c1), (val_x, c2) = self.features(model, data_root)
        t_feat = time.perf_counter() - t0
        if splits.num_classes < 3:
            raise DataError(f"{c.dataset} at {data_root}: logreg needs at least 3 classes, found {splits.num_classes}")
        t1 = time.perf_counter()
        fits = fit_sweep(train_x, splits.train_labels, val_x, c.lambdas, epochs=c.epochs, it0=c.it0, tol=c.tol,
                         seed=c.seed, threads=c.threads)
        t_fit = (time.perf_counter() - t1) / len(fits)
        out = []
        for lambd, fit in zip(c.lambdas, fits):
            hits = fit.predictions == splits.val_labels
            out.append(ProtocolResult(
                metrics={"top1": accuracy_percent(int(hits.sum()), len(hits))}, dataset=c.dataset,
                split=c.val_split, seed=c.seed, variant={"lambda": lambd, "feature": _FEATURE[c.avgpool_patchtokens]},
                per_image=hits_block({"top1": hits}),
                params={"lambda": lambd, "solver": "cyanure catalyst-miso, multiclass-logistic, l2, no intercept",
                        "epochs": c.epochs, "epochs_run": fit.epochs, "it0": c.it0, "tol": c.tol,
                        "train_top1": 100.0 * fit.train_accuracy, "feature_dim": int(train_x.shape[1]),
                        "n_train": int(len(train_x)), "n_val": int(len(val_x)), "num_classes": splits.num_classes,
                        "transform": f"resize {c.resize} {c.interpolation} -> center crop {c.crop}",
                        "features_from_cache": bool(c1 and c2),
                        **self.train_subset_params()},
                cost={"extract_s": round(t_feat, 3), "fit_s": round(t_fit, 3)}))
        if self.holdout_on():
            out.append(self._holdout_result(splits, train_x, out))
        return out

    def _holdout_result(self, splits, train_x: np.ndarray, swept: list[ProtocolResult]) -> ProtocolResult:
        """The lambda with the best top-1 on the holdout (fits on the rest of the training split; the
        first of equals), reported with its fit on every training image (the sweep's result)."""
        c = self.cfg
        kept, held = carve(splits.train_labels, c.selection_holdout, c.selection_seed)
        fits = fit_sweep(train_x[kept], splits.train_labels[kept], train_x[held], c.lambdas, epochs=c.epochs,
                         it0=c.it0, tol=c.tol, seed=c.seed, threads=c.threads)
        held_top1 = [accuracy_percent(int((f.predictions == splits.train_labels[held]).sum()), len(held))
                     for f in fits]
        j = max(range(len(fits)), key=lambda i: (held_top1[i], -i))
        chosen = swept[j]
        return ProtocolResult(
            metrics=dict(chosen.metrics), dataset=c.dataset, split=c.val_split, seed=c.seed,
            variant={"selection": "holdout best", "feature": chosen.variant["feature"]}, per_image=chosen.per_image,
            params={**chosen.params, "selection": "holdout best", "chosen_lambda": c.lambdas[j],
                    "selection_top1_by_lambda": {f"{lam:g}": v for lam, v in zip(c.lambdas, held_top1)},
                    **self.holdout_params(len(kept), len(held))})
