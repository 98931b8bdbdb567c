"""A linear probe on a frozen backbone: every learning rate of a grid trained at once on one
backbone forward per batch (harness.probes.linear_grid), the input vector read from the last
blocks' class tokens and patch means (harness.probes.labelled_features), the best (epoch, lr) on
the evaluation split reported, and with ``selection_holdout`` the choices made on a held-out part
of the training split (harness.probes.grid_selection).

The backbone is frozen in the strict sense: eval mode (no dropout, no drop-path, no
BatchNorm statistics updates) and torch.no_grad for its forward. Validation features are
deterministic (Resize -> CenterCrop), so they come from the harness.features.extract cache and are
computed once instead of once per epoch as in the official scripts; the numbers are the same.
`cached_features: true` trains on cached val-transform features of the train split (no
augmentation): fast screening, its own fingerprint. A protocol subclasses
:class:`LinearGridProbe`, registers it and names its recipes as presets.
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import numpy as np
import torch
from tqdm.auto import tqdm

from harness.context.chance import uniform_topk
from harness.data.holdout import SelectionHoldoutSetting
from harness.data.subsets import TrainSubsetSetting
from harness.data.transforms import ResizeCenterCrop
from harness.errors import ConfigError
from harness.features.extract import batch_features, extract_features
from harness.models.handle import ModelHandle
from harness.probes.grid_selection import EVAL_BEST, HOLDOUT_BEST, fit_params, holdout_choices, last_epoch_params
from harness.probes.labelled_features import Layout, accuracy_per_image, assemble, load_splits
from harness.probes.linear_data import (STREAM_INIT, AugmentedImages, RandomResizedCropFlip, augmented_loader,
                                        epoch_batches, seeded_generator, steps_per_epoch)
from harness.probes.linear_grid import GridHistory, GridSGD, LinearHeads, Schedule, select_best, train_grid
from harness.protocol import Protocol, ProtocolResult
from harness.runtime.device import module_device, pin_memory

log = logging.getLogger(__name__)


def arch_feature_defaults(embed_dim: int, depth: int) -> tuple[int, bool]:
    """DINO's per-arch feature choice (eval_linear.py help: "n=4 when evaluating ViT-Small
    and n=1 with ViT-Base"; avgpool "False for ViT-Small and True with ViT-Base"; iBOT's
    run.sh: small -> (4, 0), base/large -> (1, 2)). Narrower than ViT-S (ViT-Ti, the CPU
    preset) follows ViT-S, i.e. DINO's argument defaults; n is capped at the depth."""
    if embed_dim <= 384:
        return min(4, depth), False
    return 1, True


@dataclass
class LinearConfig:
    dataset: str = "imagenet"
    train_split: str = "train"
    val_split: str = "val"
    recipe: str = "dino"  # the preset's name, shown in the result's variant
    # ---- features: None = by arch (arch_feature_defaults)
    n_last_blocks: int | None = None
    avgpool_patchtokens: bool | None = None
    feature_layout: Layout = "concat"  # "interleave": DINO's CLS/avgpool layout
    # ---- head
    batchnorm: bool = False
    init_std: float = 0.01
    # ---- optimisation (lr = base_lr * batch_size / 256 for every base lr)
    base_lrs: list[float] = field(default_factory=lambda: [0.001])
    batch_size: int = 1024
    epochs: int = 100
    momentum: float = 0.9
    weight_decay: float = 0.0
    lr_schedule: Schedule = "cosine_epoch"
    drop_last: bool = False
    eval_every: int = 1
    # ---- images
    crop: int = 224
    resize: int = 256
    val_interpolation: Literal["bicubic", "bilinear"] = "bicubic"
    rrc_scale: tuple[float, float] = (0.08, 1.0)
    rrc_ratio: tuple[float, float] = (3.0 / 4.0, 4.0 / 3.0)
    rrc_interpolation: Literal["bilinear", "bicubic"] = "bilinear"
    hflip: bool = True
    cached_features: bool = False  # train on cached val-transform features, no augmentation
    seed: int = 0
    precision: Literal["fp32", "fp16", "bf16"] = "fp32"  # feature extraction (harness.runtime.device)
    # a named training subset (harness.data.subsets: imagenet_1pct / imagenet_10pct or a list's
    # path); its name, content hash and size join the fingerprint; empty: the whole training split
    train_subset: str = ""
    # a fraction of every training class held out to choose the epoch and lr on (harness.data.holdout;
    # 0 = off, the papers' rule alone); with its seed, in the fingerprint when on
    selection_holdout: float = 0.0
    selection_seed: int = 0
    # ---- execution only (not in the fingerprint)
    num_workers: int = 0
    feature_batch_size: int = 64
    cache: bool = True
    progress: bool = True

    def __post_init__(self):
        problems = []
        if not self.base_lrs or min(self.base_lrs) <= 0:
            problems.append(f"base_lrs must be positive, found {self.base_lrs}")
        if self.batch_size < 1 or self.epochs < 1 or self.eval_every < 1:
            problems.append(f"batch_size, epochs and eval_every must be >= 1, found "
                            f"{self.batch_size}, {self.epochs}, {self.eval_every}")
        if self.n_last_blocks is not None and self.n_last_blocks < 1:
            problems.append(f"n_last_blocks must be >= 1 or null (by arch), found {self.n_last_blocks}")
        if self.crop > self.resize:
            problems.append(f"crop {self.crop} is larger than resize {self.resize}")
        if not 0.0 <= self.selection_holdout < 1.0:
            problems.append(f"selection_holdout must be in [0, 1), found {self.selection_holdout}")
        if problems:
            raise ValueError("; ".join(problems))


class LinearGridProbe(SelectionHoldoutSetting, TrainSubsetSetting, Protocol):
    """A linear probe over a learning-rate grid on a frozen backbone; the protocol that registers it
    brings its presets (its recipes) and its conformance run."""

    Config = LinearConfig
    # recipe: a label (the settings are hashed); seed: recorded as the result's seed.
    # train_subset, selection_*: their mixins fold them into the fingerprint when they ask for something
    NOT_IN_FINGERPRINT = ("recipe", "seed", "num_workers", "feature_batch_size", "cache", "progress", "train_subset",
                          "selection_holdout", "selection_seed")

    # ------------------------------------------------------------------ pieces
    def feature_choice(self, model: ModelHandle) -> tuple[int, bool]:
        b = model.backbone
        if getattr(b, "settings", {}).get("pooling") == "head":
            # a model without a class token (a CNN, Swin): its own pooled feature, as DINO's
            # eval_linear reads a ResNet (fc replaced by Identity), and no avgpool concatenation
            n_auto, avg_auto = 1, False
        else:
            n_auto, avg_auto = arch_feature_defaults(b.embed_dim, b.num_blocks)
        n = self.cfg.n_last_blocks if self.cfg.n_last_blocks is not None else n_auto
        avg = self.cfg.avgpool_patchtokens if self.cfg.avgpool_patchtokens is not None else avg_auto
        if n > b.num_blocks:
            raise ConfigError(f"n_last_blocks={n} but {b.arch} has {b.num_blocks} blocks")
        if avg and self.cfg.feature_layout == "interleave" and n != 1:
            raise ConfigError(f"feature_layout 'interleave' (DINO) needs n_last_blocks=1, found {n}")
        return n, avg

    def val_transform(self) -> ResizeCenterCrop:
        c = self.cfg
        return ResizeCenterCrop(resize=c.resize, crop=c.crop, interpolation=c.val_interpolation)

    def train_transform(self) -> RandomResizedCropFlip:
        c = self.cfg
        return RandomResizedCropFlip(size=c.crop, scale=tuple(c.rrc_scale), ratio=tuple(c.rrc_ratio),
                                     interpolation=c.rrc_interpolation, hflip=c.hflip)

    def lrs(self) -> list[float]:
        return [b * self.cfg.batch_size / 256.0 for b in self.cfg.base_lrs]  # linear scaling rule

    # ------------------------------------------------------------------ run
    def chance_results(self, data_root: Path) -> list[ProtocolResult]:
        """The chance row's record (harness.context.chance): a uniform guess."""
        c = self.cfg
        splits = load_splits(c.dataset, data_root, c.train_split, c.val_split)
        return [ProtocolResult(metrics=uniform_topk(splits.num_classes), dataset=c.dataset, split=c.val_split,
                               seed=c.seed, variant=self._variant(),
                               params={"chance": "uniform random guess", "num_classes": splits.num_classes,
                                       "n_val": len(splits.val)})]

    def _variant(self) -> dict:
        variant = {"recipe": self.cfg.recipe}
        if self.cfg.cached_features:
            variant["cached_features"] = True
        return variant

    def run(self, model: ModelHandle, data_root: Path) -> list[ProtocolResult]:
        c = self.cfg
        t_start = time.perf_counter()
        splits = self.restrict_train(load_splits(c.dataset, data_root, c.train_split, c.val_split))
        n_blocks, avgpool = self.feature_choice(model)
        backbone = model.backbone
        was_training = backbone.training
        backbone.eval()  # frozen: no dropout / drop-path, no BN statistics updates
        try:
            fkw = dict(n_last_blocks=n_blocks, final_norm=True, batch_size=c.feature_batch_size,
                       num_workers=c.num_workers, cache=c.cache, progress=c.progress, precision=c.precision)

            def probe_input(cls, patch_mean):
                return assemble(cls, patch_mean, n_last_blocks=n_blocks, avgpool=avgpool, layout=c.feature_layout)

            device = module_device(backbone)  # the heads train where the backbone lives
            f_val = extract_features(model, splits.val, self.val_transform(), desc="linear val", **fkw)
            val_x = probe_input(f_val.cls, f_val.patch_mean).to(device)
            val_y = torch.from_numpy(splits.val_labels).to(device)
            steps = self._steps_per_epoch(len(splits.train))
            if c.cached_features:
                batches = self._cached_batches(model, splits, fkw, probe_input, device)
            else:
                batches = self._augmented_batches(backbone, splits, n_blocks, probe_input, device)
            lrs = self.lrs()
            hist = self._train_heads(lrs, batches, val_x, val_y, splits.num_classes, steps, device)
            results = [self._result(hist, lrs, splits, n_blocks, avgpool, val_x.shape[1],
                                    time.perf_counter() - t_start)]
            if self.holdout_on():
                results += self._holdout_results(model, splits, fkw, probe_input, (val_x, val_y), n_blocks, device)
        finally:
            backbone.train(was_training)
        return results

    def _steps_per_epoch(self, n_train: int) -> int:
        """Optimiser steps per epoch; a setting that leaves none, or a last batch BatchNorm
        cannot normalise, fails here, before any training."""
        c = self.cfg
        steps = steps_per_epoch(n_train, c.batch_size, c.drop_last)
        if steps == 0:
            raise ConfigError(f"batch_size {c.batch_size} with drop_last leaves no step for {n_train} "
                              f"training images; lower batch_size or set drop_last: false")
        if c.batchnorm and not c.drop_last and n_train % c.batch_size == 1:
            raise ConfigError(f"{n_train} training images with batch_size {c.batch_size} leave a last batch "
                              f"of one image, which BatchNorm cannot normalise; set drop_last: true or "
                              f"change batch_size")
        return steps

    def _cached_batches(self, model: ModelHandle, splits, fkw: dict, probe_input, device):
        """``batches(epoch)`` over the cached features of the unaugmented training images."""
        c = self.cfg
        n_train = len(splits.train)
        train_y = torch.from_numpy(splits.train_labels)
        f_train = extract_features(model, splits.train, self.val_transform(), desc="linear train", **fkw)

        def batches(epoch: int):
            for idx in epoch_batches(n_train, c.batch_size, c.seed, epoch, c.drop_last):
                rows = np.sort(idx.numpy())  # memmap reads in file order; batch order is irrelevant
                yield (probe_input(f_train.cls[rows], f_train.patch_mean[rows]).to(device),
                       train_y[rows].to(device))
        return batches

    def _augmented_batches(self, backbone, splits, n_blocks: int, probe_input, device):
        """``batches(epoch)`` forwarding freshly augmented training images every step."""
        c = self.cfg
        data = AugmentedImages(splits.train, splits.train_labels, self.train_transform(), c.seed)

        def batches(epoch: int):
            loader = augmented_loader(data, c.batch_size, epoch, c.drop_last, c.num_workers,
                                      pin_memory=pin_memory(device))
            for images, labels in tqdm(loader, desc=f"linear epoch {epoch + 1}/{c.epochs}",
                                       disable=not c.progress, leave=False):
                with torch.no_grad():
                    cls, pm = batch_features(backbone, images.to(device, non_blocking=True),
                                             n_last_blocks=n_blocks, precision=c.precision)
                yield probe_input(cls, pm), labels.to(device)
        return batches

    def _train_heads(self, lrs: list[float], batches, val_x: torch.Tensor, val_y: torch.Tensor, num_classes: int,
                     steps: int, device, select=None) -> GridHistory:
        """One linear head per learning rate, trained together on the same batches."""
        c = self.cfg
        heads = LinearHeads(len(lrs), val_x.shape[1], num_classes, batchnorm=c.batchnorm,
                            init_std=c.init_std, generator=seeded_generator(c.seed, STREAM_INIT)).to(device)
        opt = GridSGD(heads, torch.tensor(lrs, dtype=torch.float64, device=device), momentum=c.momentum,
                      weight_decay=c.weight_decay)
        return train_grid(heads, opt, batches, val_x, val_y, epochs=c.epochs, steps_per_epoch=steps,
                          schedule=c.lr_schedule, eval_every=c.eval_every,
                          on_epoch=self._log_epoch, select=select)

    def _log_epoch(self, epoch: int, hist: GridHistory) -> None:
        if hist.epochs and hist.epochs[-1] == epoch + 1:
            row = hist.top1[-1]
            j = max(range(len(row)), key=lambda h: row[h])
            log.info("linear epoch %d: best top-1 %.2f (base lr %g)", epoch + 1, row[j], self.cfg.base_lrs[j])

    def _result(self, hist: GridHistory, lrs, splits, n_blocks, avgpool, dim, seconds) -> ProtocolResult:
        c = self.cfg
        e, h = select_best(hist.top1)
        if hist.best_at != (e, h):
            raise RuntimeError(f"the per-image hits kept during training are those of evaluation/head "
                               f"{hist.best_at}, not of the selected {(e, h)}")
        metrics = self._metrics(hist, e, h, splits.num_classes)
        per_lr = {f"{b:g}": max(row[j] for row in hist.top1) for j, b in enumerate(c.base_lrs)}
        variant = self._variant()
        return ProtocolResult(
            metrics=metrics, dataset=c.dataset, split=c.val_split, seed=c.seed, variant=variant,
            per_image=accuracy_per_image({1: hist.best_hits[0].numpy(), 5: hist.best_hits[1].numpy()},
                                         splits.num_classes),
            params={"best_base_lr": c.base_lrs[h], "best_lr": lrs[h], "best_epoch": hist.epochs[e],
                    "epochs": c.epochs, "batch_size": c.batch_size, "num_heads": len(lrs),
                    "n_last_blocks": n_blocks, "avgpool_patchtokens": avgpool,
                    "feature_layout": c.feature_layout, "feature_dim": dim, "batchnorm": c.batchnorm,
                    "top1_by_base_lr": per_lr, "n_train": len(splits.train), "n_val": len(splits.val),
                    "num_classes": splits.num_classes, "cached_features": c.cached_features,
                    "seconds": round(seconds, 3), "selection": EVAL_BEST, **fit_params(hist, e, h),
                    **last_epoch_params(hist, h), **self.train_subset_params()},
        )

    @staticmethod
    def _metrics(hist: GridHistory, e: int, h: int, num_classes: int) -> dict[str, float]:
        metrics = {"top1": hist.top1[e][h]}
        if num_classes >= 5:  # as DINO: top-5 only with at least 5 classes
            metrics["top5"] = hist.top5[e][h]
        return metrics

    def _holdout_results(self, model: ModelHandle, splits, fkw: dict, probe_input, val, n_blocks: int,
                         device) -> list[ProtocolResult]:
        """The grid trained again on the training split less the holdout; the (epoch, lr) chosen on
        the holdout, and the last epoch with the lr chosen there, measured on the evaluation split."""
        c = self.cfg
        t_start = time.perf_counter()
        fit, held, held_y = self.carve_holdout(splits)
        f_held = extract_features(model, held, self.val_transform(), desc="linear holdout", **fkw)
        select = (probe_input(f_held.cls, f_held.patch_mean).to(device), torch.from_numpy(held_y).to(device))
        if c.cached_features:
            batches = self._cached_batches(model, fit, fkw, probe_input, device)
        else:
            batches = self._augmented_batches(model.backbone, fit, n_blocks, probe_input, device)
        hist = self._train_heads(self.lrs(), batches, *val, splits.num_classes, self._steps_per_epoch(len(fit.train)),
                                 device, select=select)
        choices = holdout_choices(hist)
        if hist.best_at != choices[HOLDOUT_BEST]:
            raise RuntimeError(f"the per-image hits kept are those of {hist.best_at}, not of {choices[HOLDOUT_BEST]}")
        seconds = time.perf_counter() - t_start
        out = []
        for selection, (e, h) in choices.items():
            hits = hist.best_hits if selection == HOLDOUT_BEST else (hist.last_hits[0][h], hist.last_hits[1][h])
            out.append(ProtocolResult(
                metrics=self._metrics(hist, e, h, splits.num_classes), dataset=c.dataset, split=c.val_split,
                seed=c.seed, variant={**self._variant(), "selection": selection},
                per_image=accuracy_per_image({1: hits[0].numpy(), 5: hits[1].numpy()}, splits.num_classes),
                params={"selection": selection, "chosen_base_lr": c.base_lrs[h], "chosen_epoch": hist.epochs[e],
                        "selection_top1": hist.select_top1[e][h], **fit_params(hist, e, h),
                        **self.holdout_params(len(fit.train), len(held)), "epochs": c.epochs,
                        "num_classes": splits.num_classes, "n_val": len(splits.val), "seconds": round(seconds, 3),
                        **self.train_subset_params()}))
        return out
