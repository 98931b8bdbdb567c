"""Linear transfer of frozen features (SynCLR Table 6; google-research/syn-rep-learn @ 45f451b,
SynCLR/eval/main_downstream_linear.py).

Features as the script extracts them: Resize(image_size, bicubic) -> CenterCrop(image_size) with
CLIP's mean and std (its ``normalisation=True`` default; ``--no-norm``: normalisation "none"), then
``forward_features``: the final-normed CLS token (models_vit ``global_pool=False``). The recipe on
those features is benchmarks.transfer.recipe, the split plan benchmarks.transfer.splits, the
metrics benchmarks.transfer.metrics. One result per run: the data set's published metric on its
test split, the C chosen on validation (never on test) and the whole validation curve in params.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np

from harness.data.official_split import OfficialSplit
from harness.data.transforms import ResizeCenterCrop
from harness.errors import ConfigError, DataError
from harness.features.extract import extract_features
from harness.models.handle import ModelHandle
from harness.per_image import hits_block
from harness.presets import load_presets
from harness.protocol import Protocol, ProtocolResult
from harness.registry import DATASETS, register_protocol

from benchmarks.transfer import metrics as transfer_metrics
from benchmarks.transfer import recipe, splits
from benchmarks.transfer.per_image_kind import class_hits_block, voc11_block

CLIP_MEAN = (0.48145466, 0.4578275, 0.40821073)
CLIP_STD = (0.26862954, 0.26130258, 0.27577711)
METRICS = ("top1", "mean_per_class", "mAP")
CHANCE_DRAWS = 200


@dataclass
class TransferConfig:
    dataset: str = "dtd"
    image_size: int = 224  # -i: Resize(short side) and CenterCrop
    interpolation: Literal["bicubic", "bilinear"] = "bicubic"
    normalisation: Literal["clip", "none"] = "clip"
    wd_from: float = -6.0  # C = 1 / wd over torch.logspace(wd_from, wd_to, wd_values)
    wd_to: float = 5.0
    wd_values: int = 45
    valid_size: float = 0.2  # share of the training split held out where there is no own val split
    split_seed: int = 0
    max_iter: int = 1000
    tol: float = 1e-12
    standardize: bool = True
    # a feature dimension constant over the fitting split: "refuse" (the official script would
    # divide by its zero std); "unit": divided by 1, scikit-learn StandardScaler's guard (opt-in)
    zero_variance: Literal["refuse", "unit"] = "refuse"
    metric: str = ""  # "": the data set's published metric
    ap_curve: Literal["sklearn", "devkit"] = "sklearn"  # sklearn: the official voc_ap on sklearn's curve
    precision: Literal["fp32", "fp16", "bf16"] = "fp32"
    batch_size: int = 64
    num_workers: int = 0
    cache: bool = True
    progress: bool = True

    def __post_init__(self):
        if self.metric not in ("", *METRICS):
            raise ValueError(f"metric must be '' (the data set's own) or one of {', '.join(METRICS)}, "
                             f"found {self.metric!r}")
        if not 0 < self.valid_size < 1:
            raise ValueError(f"valid_size must be in (0, 1), found {self.valid_size}")
        if self.wd_values < 1 or self.max_iter < 1:
            raise ValueError("need wd_values >= 1 and max_iter >= 1")


@register_protocol("transfer")
class TransferProtocol(Protocol):
    Config = TransferConfig
    NOT_IN_FINGERPRINT = ("batch_size", "num_workers", "cache", "progress")
    ABSENT_AT = {"zero_variance": "refuse"}  # records made before the guard are the refusing default's
    PRESETS = load_presets("transfer", Path(__file__).parent / "presets")
    DEFAULT_PRESET = "synclr"

    def transform(self) -> ResizeCenterCrop:
        c = self.cfg
        mean, std = (CLIP_MEAN, CLIP_STD) if c.normalisation == "clip" else ((0.0, 0.0, 0.0), (1.0, 1.0, 1.0))
        return ResizeCenterCrop(resize=c.image_size, crop=c.image_size, interpolation=c.interpolation,
                                mean=mean, std=std)

    def _features(self, model: ModelHandle, source, name: str) -> tuple[np.ndarray, bool]:
        c = self.cfg
        fs = extract_features(model, source, self.transform(), n_last_blocks=1, final_norm=True,
                              batch_size=c.batch_size, num_workers=c.num_workers, cache=c.cache,
                              progress=c.progress, precision=c.precision,
                              desc=f"transfer {c.dataset} {name}")
        return np.asarray(fs.cls[:, -1], dtype=np.float32), fs.from_cache

    def arrays(self, model: ModelHandle, data_root: Path) -> tuple[splits.Arrays, object]:
        """The recipe's four sets from the data set's splits, and the base split's reader."""
        c = self.cfg
        reader, plan = self._reader(), self.plan()
        base = reader(data_root, plan.base_split)
        test = reader(data_root, plan.test_split)
        parts = {"base": (base, plan.base_split), "test": (test, plan.test_split)}
        if plan.val_split:
            parts["val"] = (reader(data_root, plan.val_split), plan.val_split)
        got = {k: (self._features(model, src, split)[0], labels_of(src, base)) for k, (src, split) in parts.items()}
        if plan.val_split:
            return splits.own_validation(got["base"], got["val"], got["test"], plan.val_split), base
        return splits.carved_validation(got["base"], got["test"], plan.base_split, c.valid_size, c.split_seed), base

    def chance_results(self, data_root: Path) -> list[ProtocolResult]:
        """The chance row (harness.context.chance) on the test split: a uniform random class (top-1 and
        mean per class: 1 / classes); for mAP, random scores, the mean AP over ``CHANCE_DRAWS`` seeded
        draws scored by the metric's own code (an estimate, stated in the record)."""
        c = self.cfg
        reader, plan = self._reader(), self.plan()
        base, test = reader(data_root, plan.base_split), reader(data_root, plan.test_split)
        metric = c.metric or plan.metric
        check_metric(metric, base)
        n_classes = len(base.classes)
        params = {"num_classes": n_classes, "n_test": len(test)}
        if metric == "mAP":
            labels = labels_of(test, base)
            rng = np.random.default_rng(c.split_seed)
            draws = [float(transfer_metrics.mean_ap(rng.random(labels.shape), labels, curve=c.ap_curve)[0])
                     for _ in range(CHANCE_DRAWS)]
            value = float(np.mean(draws))
            params.update(chance=f"random scores, mean of {CHANCE_DRAWS} draws (seed {c.split_seed})",
                          chance_std=float(np.std(draws)))
        else:
            value = 100.0 / n_classes
            params.update(chance="uniform random class (expected)")
        return [ProtocolResult(metrics={metric: value}, dataset=c.dataset, split=plan.test_split, seed=c.split_seed,
                               params=params)]

    def plan(self) -> splits.Plan:
        """The data set's split plan and published metric (benchmarks.transfer.splits.PLANS)."""
        if self.cfg.dataset not in splits.PLANS:
            raise ConfigError(f"dataset {self.cfg.dataset!r} is no linear-transfer data set; choose one of "
                              f"{', '.join(sorted(splits.PLANS))}")
        return splits.PLANS[self.cfg.dataset]

    def _reader(self):
        self.plan()
        reader = DATASETS.get(self.cfg.dataset)
        if not (isinstance(reader, type) and issubclass(reader, OfficialSplit)):
            raise ConfigError(f"dataset {self.cfg.dataset!r} is read by {reader!r}, not by a reader of official "
                              f"split files")
        return reader

    def input_sizes(self) -> dict[str, int]:
        """What the runner checks against the model's stride before any image is read (its error
        names the protocol, the model and the nearest sizes that work)."""
        return {"image_size": int(self.cfg.image_size)}

    def run(self, model: ModelHandle, data_root: Path) -> list[ProtocolResult]:
        c = self.cfg
        patch = int(model.backbone.patch_size)
        if c.image_size % patch:  # the runner checks input_sizes() first; a direct call is refused alike
            lower, upper = max(patch, c.image_size // patch * patch), (c.image_size // patch + 1) * patch
            raise ConfigError(f"transfer: image_size {c.image_size} is not a multiple of the stride {patch} of model "
                              f"{model.name}; set image_size={lower} or {upper} (--set image_size=N)")
        t0 = time.perf_counter()
        data, base = self.arrays(model, data_root)
        t_feat = time.perf_counter() - t0
        metric = c.metric or self.plan().metric
        check_metric(metric, base)
        check_fit_labels(metric, data, c.dataset)
        t1 = time.perf_counter()
        xs = self.standardised(data)
        kw = dict(max_iter=c.max_iter, tol=c.tol, curve=c.ap_curve)
        grid = recipe.c_grid(c.wd_from, c.wd_to, c.wd_values)
        sel = recipe.select_c(xs["train"], data.train[1], xs["val"], data.val[1], grid, metric, **kw)
        if sel.c is None:
            raise DataError(f"{c.dataset} at {data_root}: no C of the sweep scored above 0 on the validation "
                            f"split ({data.val_source}); the official script has no C to refit with")
        final = recipe.fit_and_score(xs["trainval"], data.trainval[1], xs["test"], data.test[1], sel.c, metric, **kw)
        t_fit = time.perf_counter() - t1
        return [ProtocolResult(
            metrics={metric: final.score}, dataset=c.dataset, split=self.plan().test_split, seed=c.split_seed,
            per_image=per_image_block(metric, data.test[1], final.predictions, len(base.classes), c.ap_curve),
            params={"C": sel.c, "val_score": sel.val_score, "val_curve": [[cv, s] for cv, s in sel.curve],
                    "validation": data.val_source, "metric": metric, "n_train": len(data.train[0]),
                    "n_val": len(data.val[0]), "n_trainval": len(data.trainval[0]), "n_test": len(data.test[0]),
                    "num_classes": len(base.classes), "feature_dim": int(data.train[0].shape[1]),
                    "solver": "sklearn LogisticRegression lbfgs (the objective of the official cuML fit)"},
            cost={"extract_s": round(t_feat, 3), "fit_s": round(t_fit, 3)})]

    def standardised(self, data: splits.Arrays) -> dict[str, np.ndarray]:
        """The official ``load_features(normalize=True)``: train/val on train's statistics,
        trainval/test on trainval's."""
        if not self.cfg.standardize:
            return {"train": data.train[0], "val": data.val[0], "trainval": data.trainval[0], "test": data.test[0]}
        guard = {"zero_variance": self.cfg.zero_variance, "where": f"transfer on {self.cfg.dataset}"}
        tr, va = recipe.standardise(data.train[0], data.val[0], source="training features", **guard)
        tv, te = recipe.standardise(data.trainval[0], data.test[0], source="train+val features", **guard)
        return {"train": tr, "val": va, "trainval": tv, "test": te}


def labels_of(source, base) -> np.ndarray:
    """Class indices (or the 0/1 label matrix) of ``source`` in ``base``'s class order."""
    if source.label_matrix is not None:
        return source.label_matrix
    labels = np.asarray(source.targets, dtype=np.int64)
    if list(source.classes) == list(base.classes):
        return labels
    index = {name: k for k, name in enumerate(base.classes)}
    missing = [n for n in source.classes if n not in index]
    if missing:
        raise DataError(f"{source.name} at {source.root}: split {source.split!r} has class(es) "
                        f"{', '.join(missing[:5])} that {base.split!r} lacks; a classifier can never predict them")
    return np.array([index[n] for n in source.classes], dtype=np.int64)[labels]


def check_metric(metric: str, base) -> None:
    multi_label = base.label_matrix is not None
    if (metric == "mAP") != multi_label:
        raise ConfigError(f"metric {metric!r} does not fit {base.name}: mAP is for multi-label sets (VOC2007), "
                          "top1 / mean_per_class for single-label ones")


def check_fit_labels(metric: str, data: splits.Arrays, dataset: str) -> None:
    """A class column with one value cannot be fit (VOC's per-class binary fits; sklearn refuses)."""
    if metric != "mAP":
        return
    for name, (_, y) in (("train", data.train), ("train+val", data.trainval)):
        constant = [k for k in range(y.shape[1]) if y[:, k].min() == y[:, k].max()]
        if constant:
            raise DataError(f"{dataset}: class(es) {constant[:5]} have no positive or no negative image in the "
                            f"{name} set; each of the per-class binary fits needs both")


def per_image_block(metric: str, labels: np.ndarray, predictions: np.ndarray, num_classes: int, curve: str):
    if metric == "mAP":
        return voc11_block(predictions, labels, curve)
    hits = np.asarray(predictions) == np.asarray(labels)
    if metric == "top1":
        return hits_block({"top1": hits})
    return class_hits_block(labels, hits, num_classes)
