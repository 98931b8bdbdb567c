"""Dense nearest-neighbour retrieval (CrIBo Table 1; Balazevic et al. 2023): a k-NN
classifier on the patch features of a subsampled training set, evaluated on every patch
of the validation set, reported as mIoU per training fraction (1/128, 1/64, 1/8, 1/1;
mean +- std over 5 seeds for fractions below 1).

Two presets, one implementation (benchmarks/dense_nn/README.md lists every difference and its source):

- ``cribo``: CrIBo's text. Images only down-sampled to the closest multiple of the patch
  size (aspect kept), no bank augmentation, patch labels by majority vote (ignore pixels
  excluded, all-ignore patches dropped), k = 50, unweighted majority among the neighbours
  (ties -> smallest class), each validation patch's label on all of its pixels, plain mIoU.
- ``hbird``: open-hummingbird-eval v2.0.0 by default, quirks included. Square resize, its
  normalisation (std 0.255 for blue, its typo), bank from augmented crops x aug_epochs, soft
  class-histogram labels, optional memory cap, softmax(cos / 0.02) over k = 30, bilinear
  upsampling of the scores, its metric (Hungarian matching, mean over every class); plain
  mIoU and std 0.225 are opt-in settings.

Features come from `harness.features.extract.extract_features` (cached): the training split is
extracted once and every (fraction, seed) bank indexes into it. Augmented banks (hbird)
are extracted per (seed, epoch) over the union of that seed's subsets (a crop depends on
(seed, epoch, image) only, so nested subsets share it); they cannot be shared across seeds.
"""
from __future__ import annotations

import functools
import math
import sys
import time
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

from benchmarks.dense_nn.aug import AugmentedView, HbirdAugment, PreparedTensor, torch_nearest_resize
from benchmarks.dense_nn.core import (CoreSettings, ImageLabels, aggregate, build_bank, check_mask, evaluate,
                                      image_labels, iter_arrays, memory_per_image, predict_image, seeded_rand)
from benchmarks.dense_nn.index import IndexSpec
from benchmarks.dense_nn.metric import ConfusionMatrix, compute_miou
from benchmarks.dense_nn.subsets import Subset, check_nested, plan_subsets, write_subset_list
from harness.config import from_dict
from harness.context.chance import uniform_segmentation
from harness.data.transforms import IMAGENET_MEAN, IMAGENET_STD, PatchMultipleResize, SquareResize
from harness.runtime.device import module_device
from harness.errors import ConfigError, DataError
from harness.examples import Example, Panel, chosen_items, seen_by_model
from harness.io_utils import atomic_write
from harness.presets import load_presets
from harness.protocol import Protocol, ProtocolResult
from harness.registry import DATASETS, register_protocol

DEFAULT_SEEDS = [42, 400, 783, 1293, 4019]
DEFAULT_FRACTIONS = ["1/128", "1/64", "1/8", "1/1"]
# Split names per dataset when the config leaves them unset.
DEFAULT_SPLITS = {"voc": ("trainaug", "val"), "ade20k": ("training", "validation")}


@dataclass
class Config:
    dataset: str = "voc"
    train_split: str | None = None       # None: DEFAULT_SPLITS[dataset]
    val_split: str | None = None
    preset: str | None = None            # the preset these values came from (recorded)
    # --- subsampling
    fractions: list[str] = field(default_factory=lambda: list(DEFAULT_FRACTIONS))
    seeds: list[int] = field(default_factory=lambda: list(DEFAULT_SEEDS))
    subset_dir: str | None = None        # open-hummingbird-eval file_sets/ (else generated lists)
    # --- images and features
    resize: Literal["patch_multiple", "square"] = "patch_multiple"
    input_size: int = 224                # square
    max_side: int | None = None          # patch_multiple: cap on the longer side
    interpolation: Literal["bilinear", "bicubic"] = "bilinear"
    mask_resize: Literal["pil_nearest", "torch_nearest"] = "pil_nearest"
    norm_mean: list[float] = field(default_factory=lambda: list(IMAGENET_MEAN))
    norm_std: list[float] = field(default_factory=lambda: list(IMAGENET_STD))
    n_last_blocks: int = 1               # patch tokens of the last n blocks, concatenated
    final_norm: bool = True              # final LayerNorm on the tokens
    precision: Literal["fp32", "fp16", "bf16"] = "fp32"  # feature extraction (harness.runtime.device)
    # --- memory bank
    bank_augment: Literal["none", "hbird"] = "none"
    aug_epochs: int = 1
    aug_scale: list[float] = field(default_factory=lambda: [0.5, 2.0])
    aug_jitter: float = 0.1
    aug_jitter_p: float = 0.5
    label_mode: Literal["majority", "soft"] = "majority"
    bank_ignore: Literal["drop", "zero", "extra_class", "hbird"] = "drop"
    memory_size: int | None = None
    bank_dtype: Literal["float16", "float32"] = "float16"
    # --- classifier
    k: int = 50
    vote_mode: Literal["majority", "softmax"] = "majority"
    temperature: float = 0.02
    upsample: Literal["nearest", "bilinear"] = "nearest"
    index: Literal["exact", "ivfpq"] = "exact"
    ivf_nlist: int = 1024
    pq_m: int = 16
    pq_nbits: int = 8
    nprobe: int = 32
    ivf_train_size: int = 131072
    # --- metric
    hungarian: bool = False
    count_ignored_class: bool = False
    count_absent_classes: bool = False
    # --- execution (not in the fingerprint)
    batch_size: int = 32
    num_workers: int = 0
    search_chunk: int = 8192
    search_device: str = "auto"  # auto = the model's device; cpu | cuda | cuda:N
    threads: int | None = None
    memory_budget_gb: float | None = None
    artifacts_dir: str | None = None
    write_subsets: bool = True
    progress: bool = True

    def __post_init__(self):
        checks = [
            (self.k >= 1, f"k must be >= 1, found {self.k}"),
            (self.temperature > 0, f"temperature must be > 0, found {self.temperature}"),
            (self.aug_epochs >= 1, f"aug_epochs must be >= 1, found {self.aug_epochs}"),
            (self.bank_augment != "none" or self.aug_epochs == 1,
             "aug_epochs > 1 needs bank_augment 'hbird' (epochs without augmentation repeat the bank)"),
            (self.bank_augment != "hbird" or self.resize == "square",
             "bank_augment 'hbird' makes square crops: use resize 'square'"),
            (self.memory_size is None or self.memory_size >= 1, "memory_size must be >= 1 or null"),
            (self.n_last_blocks >= 1, "n_last_blocks must be >= 1"),
            (len(self.norm_mean) == 3 and len(self.norm_std) == 3, "norm_mean/norm_std need 3 values"),
            (len(self.aug_scale) == 2, "aug_scale needs 2 values"),
            (self.max_side is None or self.max_side >= 1, "max_side must be >= 1 or null"),
            (bool(self.seeds), "seeds must not be empty"),
            (bool(self.fractions), "fractions must not be empty"),
        ]
        for ok, msg in checks:
            if not ok:
                raise ValueError(msg)


# cribo, hbird, hbird_synth: benchmarks/dense_nn/presets/dense_nn_*.yaml
PRESETS: dict[str, dict[str, Any]] = load_presets("dense_nn", Path(__file__).parent / "presets")


def resolve_bank_ignore(mode: str, dataset: str) -> str:
    """'hbird': what open-hummingbird-eval does per dataset — ADE20K keeps the ignored
    "other" pixels as an extra class, Pascal VOC maps 255 to background (class 0)."""
    if mode != "hbird":
        return mode
    return "extra_class" if dataset.lower().startswith("ade") else "zero"


def core_settings(cfg: Config, num_classes: int, ignore_index: int, patch_size: int,
                  model_device: str | None = None) -> CoreSettings:
    """``model_device`` (the backbone's device, e.g. "cpu", "cuda:1") resolves search_device
    "auto": a run asked for on the CPU searches on the CPU even where torch sees a GPU. Without
    a model (features in) "auto" is CUDA when torch sees one (harness.runtime.device)."""
    search_device = cfg.search_device
    if search_device == "auto" and model_device is not None:
        search_device = model_device
    return CoreSettings(
        num_classes=num_classes, ignore_index=ignore_index, patch_size=patch_size, k=cfg.k,
        label_mode=cfg.label_mode, vote_mode=cfg.vote_mode, temperature=cfg.temperature,
        upsample=cfg.upsample, bank_ignore=resolve_bank_ignore(cfg.bank_ignore, cfg.dataset),
        memory_size=cfg.memory_size,
        index=IndexSpec(kind=cfg.index, dtype=cfg.bank_dtype, nlist=cfg.ivf_nlist, pq_m=cfg.pq_m,
                        pq_nbits=cfg.pq_nbits, nprobe=cfg.nprobe, train_size=cfg.ivf_train_size,
                        device=search_device),
        search_chunk=cfg.search_chunk)


def metrics_from_confusion(conf: np.ndarray, cfg: Config) -> dict[str, Any]:
    r = compute_miou(conf, hungarian=cfg.hungarian, count_absent_classes=cfg.count_absent_classes,
                     count_ignored_class=cfg.count_ignored_class)
    return {"mIoU": 100.0 * r.miou, "pixel_accuracy": 100.0 * r.pixel_accuracy, "iou": r.iou,
            "n_classes_averaged": r.n_classes_averaged}


# ============================================================================ arrays in, metrics out
def dense_nn_from_features(train_patches, train_labels, val_patches, val_masks, cfg, *, num_classes: int,
                           ignore_index: int = 255, rand=None) -> dict[str, Any]:
    """The protocol's classifier on precomputed features (no model, no dataset).

    ``train_patches`` / ``val_patches``: per image (h, w, D) arrays (raw features; the
    bank is L2-normalised here). ``train_labels`` / ``val_masks``: per image (h*p, w*p)
    label maps at the geometry of the features (already resized). ``cfg``: a Config, a
    preset name or a dict of Config values (dataset-dependent choices such as
    bank_ignore 'hbird' resolve with ``cfg.dataset``). ``rand``: for the memory cap,
    ``rand(i)`` -> a function drawing U(0, 1) tensors for training image i (default:
    seeded by image index).

    Returns {"mIoU" (percent), "pixel_accuracy" (percent), "iou" (per class, fraction),
    "confusion" (C x C'), "bank_size", "n_classes_averaged"}.
    """
    if isinstance(cfg, str):
        cfg = from_dict(Config, PRESETS[cfg])
    elif isinstance(cfg, dict):
        cfg = from_dict(Config, cfg)
    train_patches = [np.asarray(p) for p in train_patches]
    val_patches = [np.asarray(p) for p in val_patches]
    if not train_patches or not val_patches:
        raise ValueError("need at least one training and one validation image")
    h0 = train_patches[0].shape[0]
    patch = int(np.asarray(train_labels[0]).shape[0] // h0)
    s = core_settings(cfg, num_classes, ignore_index, patch)
    labels = [image_labels(np.asarray(m), p.shape[:2], s, where=f"training image {i}")
              for i, (p, m) in enumerate(zip(train_patches, train_labels))]
    n_keep = None
    if cfg.memory_size is not None:
        n_keep = memory_per_image(cfg.memory_size, len(train_patches), 1)
    bank = build_bank(lambda i: train_patches[i].reshape(-1, train_patches[i].shape[-1]), labels, s,
                      rand_for=rand, n_keep=n_keep, threads=cfg.threads)
    for i, m in enumerate(val_masks):
        check_mask(np.asarray(m), num_classes, ignore_index, f"validation image {i}")
    conf = evaluate(bank, iter_arrays(val_patches, val_masks), s)
    out = metrics_from_confusion(conf.matrix, cfg)
    out.update(confusion=conf.matrix, bank_size=len(bank))
    return out


# ============================================================================ data loading helpers
def _first(batch):
    return batch[0]


class _MaskJob(Dataset):
    """Loads, resizes and checks masks (and optionally computes patch labels) in workers."""

    def __init__(self, fn, n):
        self.fn, self.n = fn, n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        return self.fn(i)


def _map(fn, n: int, num_workers: int, desc: str, progress: bool) -> list:
    from tqdm.auto import tqdm

    loader = DataLoader(_MaskJob(fn, n), batch_size=1, num_workers=num_workers, collate_fn=_first)
    return [x for x in tqdm(loader, total=n, desc=desc, disable=not progress, leave=False)]


def grid_features(fs, i: int) -> np.ndarray:
    """(h*w, n_blocks*d) float32 features of image i of a FeatureSet (blocks concatenated)."""
    block = fs.patches(i)  # (n, h, w, d)
    n, h, w, d = block.shape
    x = np.asarray(block, dtype=np.float32)
    return np.moveaxis(x, 0, 2).reshape(h * w, n * d)


def _stem_hash(stem: str) -> int:
    return zlib.crc32(stem.encode())


# ============================================================================ the protocol
@register_protocol("dense_nn")
class DenseNN(Protocol):
    Config = Config
    PRESETS = PRESETS
    DEFAULT_PRESET = "cribo"
    CONFORMANCE_RUN = ("cribo", {"dataset": "voc", "fractions": ["1/1"], "seeds": [42], "progress": False}, ".")
    RECORDED_AS = {"final_norm": "feature_norm"}  # its records' name
    NOT_IN_FINGERPRINT = ("batch_size", "num_workers", "search_chunk", "search_device", "threads", "memory_budget_gb",
                          "artifacts_dir", "write_subsets", "progress")

    # ------------------------------------------------------------------ settings
    def splits(self) -> tuple[str, str]:
        cfg = self.cfg
        default = DEFAULT_SPLITS.get(cfg.dataset, ("train", "val"))
        return cfg.train_split or default[0], cfg.val_split or default[1]

    def transform(self, patch_size: int):
        cfg = self.cfg
        mean, std = tuple(cfg.norm_mean), tuple(cfg.norm_std)
        if cfg.resize == "square":
            if cfg.input_size % patch_size:
                raise ConfigError(f"input_size {cfg.input_size} is not a multiple of the patch size "
                                  f"{patch_size}; choose e.g. {cfg.input_size // patch_size * patch_size}")
            return SquareResize(cfg.input_size, cfg.interpolation, mean, std)
        return PatchMultipleResize(patch_size, cfg.max_side, cfg.interpolation, mean, std)

    def _resize_mask(self, transform, mask: np.ndarray) -> np.ndarray:
        if self.cfg.mask_resize == "pil_nearest":
            return transform.mask(mask)
        if isinstance(transform, SquareResize):
            size = (transform.size, transform.size)
        else:
            size = transform.output_size(mask.shape[1], mask.shape[0])
        return torch_nearest_resize(mask, size)

    def aug(self) -> HbirdAugment:
        cfg = self.cfg
        return HbirdAugment(input_size=cfg.input_size, scale=tuple(cfg.aug_scale), jitter=cfg.aug_jitter,
                            jitter_p=cfg.aug_jitter_p, mean=tuple(cfg.norm_mean), std=tuple(cfg.norm_std))

    def _extract(self, model, source, transform, desc: str):
        from harness.features.extract import extract_features

        cfg = self.cfg
        return extract_features(model, source, transform, n_last_blocks=cfg.n_last_blocks, final_norm=cfg.final_norm,
                                patches=True, patch_dtype=cfg.bank_dtype, batch_size=cfg.batch_size,
                                num_workers=cfg.num_workers, progress=cfg.progress, desc=desc,
                                precision=cfg.precision)

    # ------------------------------------------------------------------ examples
    def examples(self, model, data_root, count: int = 4, seed: int = 0) -> list[Example]:
        """Val images drawn with ``seed``: the image as the model saw it, its mask at the features'
        geometry, and the prediction of a bank of every training image (unaugmented, memory cap
        drawn with ``seed``; under Hungarian matching the prediction shows unmatched clusters)."""
        cfg = self.cfg
        train_split, val_split = self.splits()
        ds_cls = DATASETS.get(cfg.dataset)
        train_ds, val_ds = ds_cls(Path(data_root), train_split), ds_cls(Path(data_root), val_split)
        patch = int(model.backbone.patch_size)
        s = core_settings(cfg, int(train_ds.num_classes), int(train_ds.ignore_index), patch,
                          str(module_device(model.backbone)))
        transform = self.transform(patch)
        fs = self._extract(model, train_ds, transform, f"dense_nn {cfg.dataset} train")
        labels = self._train_labels(train_ds, lambda i: self._resize_mask(transform, np.asarray(train_ds.load_mask(i))),
                                    fs.grids, s)
        stems = list(train_ds.stems)
        n_keep = memory_per_image(cfg.memory_size, len(stems), 1) if cfg.memory_size else None
        bank = build_bank(lambda j: grid_features(fs, j), labels, s, n_keep=n_keep,
                          rand_for=lambda j: seeded_rand([seed, 0, _stem_hash(stems[j])]))
        val_fs = self._extract(model, val_ds, transform, f"dense_nn {cfg.dataset} val")
        out = []
        for i in chosen_items(len(val_ds), count, seed):
            mask = self._resize_mask(transform, np.asarray(val_ds.load_mask(i)))
            pred = predict_image(aggregate(bank, np.array(grid_features(val_fs, i)), s),
                                 tuple(int(v) for v in val_fs.grids[i]), mask.shape, s)
            valid = mask != s.ignore_index
            acc = 100.0 * float((pred[valid] == mask[valid]).mean()) if valid.any() else float("nan")
            seen = seen_by_model(transform(val_ds.load_image(i)), transform.mean, transform.std)
            out.append(Example(str(val_ds.stems[i]), [
                Panel("input", image=seen), Panel("target", kind="labels", image=mask, ignore=s.ignore_index),
                Panel("prediction", kind="labels", image=np.asarray(pred), ignore=s.ignore_index,
                      text=f"pixel acc {acc:.1f}%")]))
        return out

    # ------------------------------------------------------------------ run
    def chance_results(self, data_root: Path) -> list[ProtocolResult]:
        """The chance row's records (harness.context.chance): the expected mIoU of a uniform random
        per-pixel guess, from the validation masks as stored, for every (fraction, seed) of a run."""
        cfg = self.cfg
        train_split, val_split = self.splits()
        ds_cls = DATASETS.get(cfg.dataset)
        train_ds, val_ds = ds_cls(Path(data_root), train_split), ds_cls(Path(data_root), val_split)
        num_classes, ignore = int(val_ds.num_classes), int(val_ds.ignore_index)
        counts = np.zeros(num_classes, np.int64)
        for i in range(len(val_ds)):
            mask = np.asarray(val_ds.load_mask(i)).ravel()
            counts += np.bincount(mask[mask != ignore], minlength=num_classes)[:num_classes]
        m = uniform_segmentation(counts, num_classes)
        subsets = plan_subsets(list(train_ds.stems), list(val_ds.stems), cfg.fractions, cfg.seeds,
                               dataset=cfg.dataset, subset_dir=cfg.subset_dir)
        params = {"chance": "uniform random per-pixel guess (expected confusion)", "num_classes": num_classes,
                  "n_val_pixels": int(counts.sum()), "iou": [None if math.isnan(v) else round(float(v), 6)
                                                            for v in m["iou"]]}
        return [ProtocolResult(metrics={"mIoU": m["mIoU"], "pixel_accuracy": m["pixel_accuracy"]},
                               dataset=cfg.dataset, split=val_split, seed=sub.seed, variant={"fraction": sub.label},
                               params=params) for sub in subsets]

    def run(self, model, data_root) -> list[ProtocolResult]:
        cfg = self.cfg
        threads = cfg.threads or torch.get_num_threads()
        data_root = Path(data_root)
        train_split, val_split = self.splits()
        ds_cls = DATASETS.get(cfg.dataset)
        train_ds = ds_cls(data_root, train_split)
        val_ds = ds_cls(data_root, val_split)
        num_classes, ignore = int(train_ds.num_classes), int(train_ds.ignore_index)
        patch = int(model.backbone.patch_size)
        s = core_settings(cfg, num_classes, ignore, patch, str(module_device(model.backbone)))
        subsets = plan_subsets(list(train_ds.stems), list(val_ds.stems), cfg.fractions, cfg.seeds,
                               dataset=cfg.dataset, subset_dir=cfg.subset_dir)
        for w in check_nested(subsets):
            print(f"[dense_nn] warning: {w}", file=sys.stderr)
        transform = self.transform(patch)
        timings: dict[str, float] = {"extract_s": 0.0, "labels_s": 0.0, "bank_s": 0.0, "search_s": 0.0}

        # validation: features once, masks once (resized, checked), kept for every run
        t0 = time.perf_counter()
        val_fs = self._extract(model, val_ds, transform, f"dense_nn {cfg.dataset}/{val_split}")
        timings["extract_s"] += time.perf_counter() - t0
        t0 = time.perf_counter()
        val_masks = _map(self._val_mask_fn(val_ds, transform, val_fs.grids, patch, num_classes, ignore),
                         len(val_ds), cfg.num_workers, "val masks", cfg.progress)
        timings["labels_s"] += time.perf_counter() - t0

        def val_items():
            for i in range(len(val_ds)):
                yield grid_features(val_fs, i), tuple(int(v) for v in val_fs.grids[i]), val_masks[i]

        runs: list[tuple[Subset, np.ndarray, int, dict | None]] = []
        for bank_fn, group in self._bank_groups(model, train_ds, transform, subsets, s, timings, threads):
            for sub in group:
                t0 = time.perf_counter()
                bank = bank_fn(sub)
                timings["bank_s"] += time.perf_counter() - t0
                t0 = time.perf_counter()
                conf = evaluate(bank, val_items(), s, ConfusionMatrix(s.num_classes, s.num_pred, s.ignore_index,
                                                                      keep_image_matrices=cfg.hungarian))
                timings["search_s"] += time.perf_counter() - t0
                runs.append((sub, conf.matrix, len(bank), self._per_image(conf)))
                if cfg.progress:
                    m = metrics_from_confusion(conf.matrix, cfg)
                    print(f"[dense_nn] {cfg.dataset} {sub.label} seed {sub.seed}: mIoU {m['mIoU']:.2f} "
                          f"(bank {len(bank):,} patches from {len(sub.stems)} images)", file=sys.stderr)
                del bank

        results = self._results(runs, train_split, val_split, s, num_classes,
                                self.artifact_dir(model, data_root, cfg.artifacts_dir))
        # the stages are shared by every (fraction, seed): each record carries the whole run's split
        for r in results:
            r.cost = {stage: round(seconds, 3) for stage, seconds in timings.items()}
        return results

    def _val_mask_fn(self, val_ds, transform, grids, patch, num_classes, ignore):
        stems = list(val_ds.stems)

        def fn(i):
            mask = self._resize_mask(transform, np.asarray(val_ds.load_mask(i)))
            where = f"validation image {stems[i]!r}"
            check_mask(mask, num_classes, ignore, where)
            h, w = (int(v) for v in grids[i])
            if mask.shape != (h * patch, w * patch):
                raise DataError(f"{where}: resized mask is {mask.shape} but its features have a {h}x{w} "
                                f"grid of {patch}px patches; image and mask sizes differ on disk")
            return mask.astype(np.uint8)
        return fn

    def _bank_groups(self, model, train_ds, transform, subsets, s, timings, threads):
        """Yields (bank_fn(subset) -> Bank, subsets it serves), extracting as little as possible."""
        cfg = self.cfg
        if cfg.bank_augment == "none":
            union = sorted(set().union(*(sub.stems for sub in subsets)))
            src = train_ds if len(union) == len(train_ds) else train_ds.subset(union)
            t0 = time.perf_counter()
            fs = self._extract(model, src, transform, f"dense_nn {cfg.dataset} train")
            timings["extract_s"] += time.perf_counter() - t0
            t0 = time.perf_counter()
            labels = self._train_labels(src, lambda i: self._resize_mask(transform, np.asarray(src.load_mask(i))),
                                        fs.grids, s)
            timings["labels_s"] += time.perf_counter() - t0
            pos = {stem: i for i, stem in enumerate(src.stems)}

            def bank_fn(sub: Subset):
                idx = [pos[st] for st in sorted(sub.stems)]
                stems = sorted(sub.stems)
                n_keep = memory_per_image(cfg.memory_size, len(idx), 1) if cfg.memory_size else None
                rand_for = lambda j: seeded_rand([sub.seed or 0, 0, _stem_hash(stems[j])])  # noqa: E731
                return build_bank(lambda j: grid_features(fs, idx[j]), [labels[i] for i in idx], s,
                                  rand_for=rand_for, n_keep=n_keep, threads=threads, max_bytes=self._max_bytes())
            yield bank_fn, subsets
            return

        aug = self.aug()
        seeds_in_order = list(dict.fromkeys(sub.seed for sub in subsets))
        for seed in seeds_in_order:
            group = [sub for sub in subsets if sub.seed == seed]
            union = sorted(set().union(*(sub.stems for sub in group)))
            src = train_ds if len(union) == len(train_ds) else train_ds.subset(union)
            pos = {stem: i for i, stem in enumerate(src.stems)}
            per_epoch = []
            for epoch in range(cfg.aug_epochs):
                view = AugmentedView(src, aug, seed, epoch)
                t0 = time.perf_counter()
                fs = self._extract(model, view, PreparedTensor(), f"dense_nn train aug s{seed} e{epoch}")
                timings["extract_s"] += time.perf_counter() - t0
                t0 = time.perf_counter()
                labels = self._train_labels(view, view.load_mask, fs.grids, s)
                timings["labels_s"] += time.perf_counter() - t0
                per_epoch.append((fs, labels))

            def bank_fn(sub: Subset, per_epoch=per_epoch, pos=pos, seed=seed):
                stems = sorted(sub.stems)
                items = [(e, pos[st], st) for e in range(cfg.aug_epochs) for st in stems]  # epochs outer
                n_keep = (memory_per_image(cfg.memory_size, len(stems), cfg.aug_epochs)
                          if cfg.memory_size else None)
                rand_for = lambda j: seeded_rand([seed, items[j][0], _stem_hash(items[j][2])])  # noqa: E731
                return build_bank(lambda j: grid_features(per_epoch[items[j][0]][0], items[j][1]),
                                  [per_epoch[e][1][i] for e, i, _ in items], s,
                                  rand_for=rand_for, n_keep=n_keep, threads=threads, max_bytes=self._max_bytes())
            yield bank_fn, group

    def _train_labels(self, src, mask_fn, grids, s: CoreSettings) -> list[ImageLabels]:
        stems = list(src.stems)

        def fn(i):
            mask = mask_fn(i)
            h, w = (int(v) for v in grids[i])
            return image_labels(np.asarray(mask), (h, w), s, where=f"training image {stems[i]!r}")
        return _map(fn, len(stems), self.cfg.num_workers, "train patch labels", self.cfg.progress)

    def _per_image(self, conf) -> dict | None:
        """The record's per-image statistics (harness.per_image), for a bootstrap over the validation
        images: the areas, or under Hungarian matching (its mapping is taken from the summed
        matrix) each image's confusion matrix."""
        cfg = self.cfg
        if cfg.hungarian:
            return conf.confusion_block(count_absent_classes=cfg.count_absent_classes,
                                        count_ignored_class=cfg.count_ignored_class)
        return conf.per_image_block(count_absent_classes=cfg.count_absent_classes,
                                    count_ignored_class=cfg.count_ignored_class)

    def _max_bytes(self) -> float | None:
        return None if self.cfg.memory_budget_gb is None else self.cfg.memory_budget_gb * 2**30

    def _results(self, runs, train_split, val_split, s: CoreSettings, num_classes,
                 art_dir: Path) -> list[ProtocolResult]:
        cfg = self.cfg
        metric_params = {"hungarian": cfg.hungarian, "count_absent_classes": cfg.count_absent_classes,
                         "count_ignored_class": cfg.count_ignored_class,
                         "name": ("hbird" if cfg.hungarian or cfg.count_absent_classes or cfg.count_ignored_class
                                  else "plain mIoU (mmseg)")}
        out = []
        for sub, conf, bank_size, per_image in runs:
            m = metrics_from_confusion(conf, cfg)
            artifacts = {}
            if cfg.write_subsets:
                if sub.fraction != 1:
                    artifacts["subset_list"] = str(write_subset_list(art_dir, sub, cfg.dataset, train_split))
                conf_path = art_dir / "confusion" / f"{sub.fraction.denominator}_{sub.seed}.npy"
                atomic_write(conf_path, functools.partial(_save_npy, array=conf))
                artifacts["confusion"] = str(conf_path)
            sha = sub.sha256
            params = {
                "preset": cfg.preset, "train_split": train_split, "n_train_images": len(sub.stems),
                "subset_sha256": sha, "subset_source": sub.source, "bank_size": int(bank_size),
                "bank_ignore": s.bank_ignore, "num_classes": num_classes, "metric": metric_params,
                "run_fingerprint": self.fingerprint({"fraction": sub.label, "seed": sub.seed, "subset_sha256": sha}),
                "iou": [None if math.isnan(v) else round(float(v), 6) for v in m["iou"]],
            }
            out.append(ProtocolResult(
                metrics={"mIoU": float(m["mIoU"]), "pixel_accuracy": float(m["pixel_accuracy"])},
                dataset=cfg.dataset, split=val_split, seed=sub.seed, variant={"fraction": sub.label},
                params=params, artifacts=artifacts, per_image=per_image))
        return out


def _save_npy(path: Path, array: np.ndarray) -> None:
    with open(path, "wb") as f:  # np.save(path) would add ".npy" to the temp name
        np.save(f, array)


# ============================================================================ tables
def summary(results: list[ProtocolResult]):
    """pandas DataFrame: one row per fraction, each seed's mIoU, mean and std (ddof=1)."""
    import pandas as pd

    rows: dict[str, dict] = {}
    for r in results:
        f = r.variant.get("fraction")
        row = rows.setdefault(f, {"fraction": f, "n_train_images": r.params.get("n_train_images")})
        row[f"seed {r.seed}"] = r.metrics["mIoU"]
    df = pd.DataFrame(list(rows.values()))
    seed_cols = [c for c in df.columns if c.startswith("seed ")]
    df["n_seeds"] = df[seed_cols].notna().sum(axis=1)
    df["mean"] = df[seed_cols].mean(axis=1)
    df["std"] = df[seed_cols].std(axis=1, ddof=1).fillna(0.0)
    order = {f: i for i, f in enumerate(sorted(df["fraction"], key=lambda x: -1 / int(x.split("/")[1])))}
    return df.sort_values("fraction", key=lambda c: c.map(order)).reset_index(drop=True)


def format_table(results: list[ProtocolResult], title: str = "dense_nn") -> str:
    if not results:
        return f"{title}: no results"
    df = summary(results)
    lines = [title, f"{'fraction':>8} {'images':>7} {'seeds':>5}  {'mIoU mean +- std':>18}  per seed"]
    seed_cols = [c for c in df.columns if c.startswith("seed ")]
    for _, row in df.iterrows():
        per = ", ".join(f"{c[5:]}: {row[c]:.2f}" for c in seed_cols if not np.isnan(row[c]))
        lines.append(f"{row['fraction']:>8} {int(row['n_train_images']):>7} {int(row['n_seeds']):>5}  "
                     f"{row['mean']:>8.2f} +- {row['std']:<6.2f}  {per}")
    return "\n".join(lines)


__all__ = ["Config", "PRESETS", "DenseNN", "dense_nn_from_features", "summary", "format_table",
           "resolve_bank_ignore"]
