"""Weighted k-NN classification on frozen features (DINO eval_knn.py; iBOT's is the same).

Train and val images go through Resize(256, bicubic) -> CenterCrop(224) -> ImageNet
normalisation; the feature (last-layer CLS after the final norm by default) is
L2-normalised; each val image takes its k most cosine-similar train images, each votes
for its class with weight exp(sim / T), T = 0.07; top-1 / top-5 over class scores. One
search for the largest k serves the whole sweep {10, 20, 100, 200}.

Defined where DINO's code is not (see benchmarks/classification/README.md):
- neighbours are ordered by similarity, exactly equal similarities by the lower train
  index; class scores likewise (equal scores: lower class index first);
- a class with no vote is never a top-5 hit (DINO's probs.sort leaves the zero-score
  classes in whatever order torch's unstable sort gives, so a zero-vote target can count
  as a hit by accident; `benchmarks/classification/fixtures/knn_dino_golden.json` records how often);
- top-5 is reported only with at least 5 classes (DINO's narrow(…, 5) fails below);
- any number of val images (DINO's 100 fixed chunks fail below 100);
- k larger than the training set uses every training image (recorded as `k_used`).
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Literal, Sequence

import numpy as np
import torch
import torch.nn.functional as F

from harness.probes.labelled_features import (FeatureKind, accuracy_metrics, accuracy_per_image, feature_for,
                                              load_splits, topk_hit_flags)
from harness.probes.similarity_buffer import SimilarityBuffer
from harness.context.chance import uniform_topk
from harness.data.subsets import TrainSubsetSetting
from harness.data.transforms import ResizeCenterCrop
from harness.runtime.device import resolve_device
from harness.errors import ConfigError, DataError
from harness.examples import Example, Panel, chosen_items, seen_by_model
from harness.features.extract import extract_features
from harness.models.handle import ModelHandle
from harness.presets import load_presets
from harness.protocol import Protocol, ProtocolResult
from harness.registry import register_protocol

log = logging.getLogger(__name__)

Backend = Literal["auto", "faiss", "torch"]


# ----------------------------------------------------------------------------- search
class Rows:
    """Row access to a 2-D array-like (ndarray, memmap, tensor) or a row function, so the
    train set is read and normalised one chunk at a time."""

    def __init__(self, data, n: int | None = None, fn: Callable[[int, int], torch.Tensor] | None = None):
        self.data, self.fn = data, fn
        self.n = n if n is not None else len(data)

    def __len__(self) -> int:
        return self.n

    def get(self, start: int, stop: int) -> torch.Tensor:
        if self.fn is not None:
            x = self.fn(start, stop)
        else:
            x = self.data[start:stop]
        if isinstance(x, np.ndarray):
            x = torch.from_numpy(np.array(x, dtype=np.float32))  # a copy: memmaps are read-only
        return x.float()


def _normalise(x: torch.Tensor, what: str) -> torch.Tensor:
    if not torch.isfinite(x).all():
        raise DataError(f"{what} features contain NaN or inf; the backbone produced non-finite "
                        f"outputs (check the checkpoint, or use precision fp32)")
    return F.normalize(x, dim=1, p=2)  # DINO: nn.functional.normalize(dim=1, p=2)


def _order(vals: torch.Tensor, idx: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Sort each row by similarity (descending), equal similarities by index (ascending)."""
    by_idx = idx.argsort(dim=1, stable=True)
    vals, idx = vals.gather(1, by_idx), idx.gather(1, by_idx)
    by_val = vals.argsort(dim=1, descending=True, stable=True)
    return vals.gather(1, by_val), idx.gather(1, by_val)


def _chunk_topk_torch(sims: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Top-k per row of a (B, n) block, ties at the k-th value resolved by lower index
    (torch.topk picks arbitrarily among equal values)."""
    kq = min(k + 1, sims.shape[1])  # a (k+1)-th value equal to the k-th reveals a tie across it
    vals, idx = sims.topk(kq, dim=1, largest=True, sorted=True)
    crowded = (vals[:, k] == vals[:, k - 1]).nonzero().flatten().tolist() if kq > k else []
    vals, idx = vals[:, :k], idx[:, :k]
    for r in crowded:  # only rows with an exact tie across the k-th place (duplicates)
        cand = (sims[r] >= vals[r, -1]).nonzero().flatten()  # ascending index
        order = sims[r, cand].argsort(descending=True, stable=True)[:k]
        vals[r], idx[r] = sims[r, cand[order]], cand[order]
    return _order(vals, idx)


def _chunk_topk_faiss(queries: torch.Tensor, base: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    import faiss

    n = base.shape[0]
    kq = min(k + 1, n)  # one extra neighbour reveals an exact tie across the k-th place
    d, i = faiss.knn(np.ascontiguousarray(queries.numpy()), np.ascontiguousarray(base.numpy()), kq,
                     metric=faiss.METRIC_INNER_PRODUCT)
    d, i = torch.from_numpy(d), torch.from_numpy(i)
    vals, idx = _order(d[:, :k], i[:, :k])
    if kq > k:
        # faiss picks arbitrarily among equal values at the boundary: redo those rows exactly.
        crowded = (d[:, k] == d[:, k - 1]).nonzero().flatten()
        if len(crowded):
            v, j = _chunk_topk_torch(queries[crowded] @ base.t(), k)
            vals[crowded], idx[crowded] = v, j
    return vals, idx


def resolved_backend(backend: str, device: torch.device) -> str:
    return ("faiss" if device.type == "cpu" else "torch") if backend == "auto" else backend


def cosine_topk(train, test, k: int, *, backend: Backend = "auto", train_chunk: int = 65536,
                test_chunk: int = 1024, device: str | torch.device = "cpu") -> tuple[torch.Tensor, torch.Tensor]:
    """The k most cosine-similar train rows for every test row: (sims, indices), (N_test, k).

    Features are L2-normalised here, train one chunk at a time, so the train set may be a
    memory-mapped array far larger than memory; the largest block ever held is
    test_chunk x train_chunk similarities (torch) and never the full test x train matrix.
    On a GPU (`device`) the torch search runs there, train chunk by train chunk, as DINO's
    knn_classifier does; "auto" is faiss on the CPU and torch on a GPU (faiss-cpu has none).
    """
    dev = torch.device(device)
    backend = resolved_backend(backend, dev)
    if backend not in ("faiss", "torch"):
        raise ConfigError(f"k-NN backend must be 'auto', 'faiss' or 'torch', found {backend!r}")
    if backend == "faiss" and dev.type != "cpu":
        raise ConfigError(f"k-NN backend 'faiss' searches on the CPU (faiss-cpu), not on {dev}; "
                          "use backend 'torch' or 'auto'")
    train = train if isinstance(train, Rows) else Rows(train)
    test = test if isinstance(test, Rows) else Rows(test)
    test_x = _normalise(test.get(0, len(test)).to(dev), "val")
    n_train, n_test = len(train), test_x.shape[0]
    if not 1 <= k <= n_train:
        raise ValueError(f"k must be in [1, {n_train}] (the train set size), found {k}")
    best_v = torch.full((n_test, k), -float("inf"), device=dev)
    best_i = torch.full((n_test, k), -1, dtype=torch.int64, device=dev)
    if backend == "torch":
        buffer = SimilarityBuffer(min(test_chunk, n_test), min(train_chunk, n_train), dev)
    for t0 in range(0, n_train, train_chunk):
        base = _normalise(train.get(t0, min(t0 + train_chunk, n_train)).to(dev, non_blocking=True), "train")
        kk = min(k, base.shape[0])
        for q0 in range(0, n_test, test_chunk):
            q = test_x[q0:q0 + test_chunk]
            if backend == "torch":
                v, i = _chunk_topk_torch(buffer.mm(q, base), kk)
            else:
                v, i = _chunk_topk_faiss(q, base, kk)
            # Earlier chunks hold lower indices and both halves are already in
            # (similarity desc, index asc) order, so a stable sort keeps that order.
            vals = torch.cat([best_v[q0:q0 + test_chunk], v], dim=1)
            idx = torch.cat([best_i[q0:q0 + test_chunk], i + t0], dim=1)
            order = vals.argsort(dim=1, descending=True, stable=True)[:, :k]
            best_v[q0:q0 + test_chunk] = vals.gather(1, order)
            best_i[q0:q0 + test_chunk] = idx.gather(1, order)
    return best_v.cpu(), best_i.cpu()


# ----------------------------------------------------------------------------- voting
def class_scores(sims: torch.Tensor, neighbour_labels: torch.Tensor, k: int, temperature: float,
                 num_classes: int) -> torch.Tensor:
    """Sum over the first k neighbours of exp(sim / T), per class: (B, num_classes)."""
    weights = (sims[:, :k] / temperature).exp()  # DINO: distances.div_(T).exp_()
    scores = torch.zeros(sims.shape[0], num_classes, dtype=weights.dtype, device=weights.device)
    return scores.scatter_add_(1, neighbour_labels[:, :k], weights)


def weighted_knn(train, train_labels, test, test_labels, *, ks: Sequence[int] = (10, 20, 100, 200),
                 temperature: float = 0.07, num_classes: int | None = None, backend: Backend = "auto",
                 train_chunk: int = 65536, test_chunk: int = 1024,
                 device: str | torch.device = "cpu", per_image: bool = False) -> dict[int, dict]:
    """DINO's weighted k-NN for every k in ``ks`` from one search: {k: {"top1", "top5", "k_used"}}.

    ``train`` / ``test``: (N, d) features (not yet normalised; ndarray, memmap, tensor or
    a `Rows`); labels: integer class indices. ``per_image``: each k's dict also holds
    ``per_image``, the record's per-image hits block (harness.per_image)."""
    # labels stay on the host (the vote moves what it needs); an unplaced tensor would take
    # torch's default device
    train_labels = torch.as_tensor(np.asarray(train_labels), dtype=torch.int64, device="cpu")
    test_labels = torch.as_tensor(np.asarray(test_labels), dtype=torch.int64, device="cpu")
    n_train, n_test = len(train_labels), len(test_labels)
    if n_test == 0 or n_train == 0:
        raise DataError(f"k-NN needs train and val images, found {n_train} train and {n_test} val")
    if len(train) != n_train or len(test) != n_test:
        raise ValueError(f"features and labels differ in length: train {len(train)} vs {n_train}, "
                         f"val {len(test)} vs {n_test}")
    c = int(num_classes if num_classes is not None else int(train_labels.max()) + 1)
    if int(train_labels.min()) < 0 or int(train_labels.max()) >= c or int(test_labels.max()) >= c:
        raise ValueError(f"labels must lie in [0, {c}); found train [{int(train_labels.min())}, "
                         f"{int(train_labels.max())}], val max {int(test_labels.max())}")
    if not ks or min(ks) < 1:
        raise ConfigError(f"ks must be positive integers, found {list(ks)}")
    k_max = min(max(ks), n_train)
    sims, idx = cosine_topk(train, test, k_max, backend=backend, train_chunk=train_chunk, test_chunk=test_chunk,
                            device=device)
    neighbour_labels = train_labels[idx]
    out = {}
    for k in ks:
        k_used = min(k, n_train)
        flags: dict[int, list[torch.Tensor]] = {1: [], 5: []}
        for q0 in range(0, n_test, test_chunk):
            scores = class_scores(sims[q0:q0 + test_chunk], neighbour_labels[q0:q0 + test_chunk], k_used,
                                  temperature, c)
            f = topk_hit_flags(scores, test_labels[q0:q0 + test_chunk], (1, 5), require_positive=True)
            for r in flags:
                flags[r].append(f[r].cpu())
        per_row = {r: torch.cat(v).numpy() for r, v in flags.items()}
        out[k] = {**accuracy_metrics({r: int(v.sum()) for r, v in per_row.items()}, n_test, c), "k_used": k_used}
        if per_image:
            out[k]["per_image"] = accuracy_per_image(per_row, c)
    return out


# ----------------------------------------------------------------------------- protocol
@dataclass
class KNNConfig:
    dataset: str = "imagenet"
    train_split: str = "train"
    val_split: str = "val"
    # Transform for both splits (DINO: Resize(256, bicubic) -> CenterCrop(224)).
    resize: int = 256
    crop: int = 224
    interpolation: Literal["bicubic", "bilinear"] = "bicubic"
    feature: FeatureKind = "cls"
    n_last_blocks: int = 1  # CLS of the last n blocks concatenated (iBOT eval_knn option)
    ks: list[int] = field(default_factory=lambda: [10, 20, 100, 200])
    temperature: float = 0.07
    precision: Literal["fp32", "fp16", "bf16"] = "fp32"  # feature extraction (harness.runtime.device)
    # a named training subset (harness.data.subsets: imagenet_1pct / imagenet_10pct or a list's
    # path); its name, content hash and size join the fingerprint; empty: the whole training split
    train_subset: str = ""
    # Exact search either way; the two differ only in float rounding of the similarities.
    # auto: faiss on the CPU, torch where the search runs on a GPU.
    backend: Backend = "auto"
    search_device: str = "auto"  # auto = the model's device; cpu | cuda | cuda:N
    train_chunk: int = 65536
    test_chunk: int = 1024
    batch_size: int = 64
    num_workers: int = 0
    cache: bool = True
    progress: bool = True

    def __post_init__(self):
        if self.feature == "avgpool" and self.n_last_blocks != 1:
            raise ValueError("feature 'avgpool' uses the last block only; set n_last_blocks: 1")
        if self.n_last_blocks < 1 or self.temperature <= 0 or not self.ks or min(self.ks) < 1:
            raise ValueError(f"need n_last_blocks >= 1, temperature > 0 and positive ks; found "
                             f"{self.n_last_blocks}, {self.temperature}, {self.ks}")
        if len(set(self.ks)) != len(self.ks):
            raise ValueError(f"ks has repeated values: {self.ks}")
        if self.crop > self.resize:
            raise ValueError(f"crop {self.crop} is larger than resize {self.resize}")


@register_protocol("knn")
class KNNProtocol(TrainSubsetSetting, Protocol):
    """Weighted k-NN (DINO). One ProtocolResult per k, variant {"k", "feature"}."""

    Config = KNNConfig
    CONFORMANCE_RUN = ("synth", {"dataset": "imagefolder", "ks": [5], "cache": False, "progress": False}, "imagenet")
    # ks: each k is its own result (variant), so the sweep list does not change any number.
    NOT_IN_FINGERPRINT = ("ks", "backend", "search_device", "train_chunk", "test_chunk", "batch_size", "num_workers",
                          "cache", "progress", "train_subset")
    PRESETS = load_presets("knn", Path(__file__).parent / "presets")
    DEFAULT_PRESET = "dino"

    def search_device(self, model: ModelHandle) -> torch.device:
        return model.device if self.cfg.search_device == "auto" else resolve_device(self.cfg.search_device)

    def transform(self) -> ResizeCenterCrop:
        c = self.cfg
        return ResizeCenterCrop(resize=c.resize, crop=c.crop, interpolation=c.interpolation)

    def extract(self, model: ModelHandle, data_root: Path):
        """Both splits and their (cached) features: (splits, train FeatureSet, val FeatureSet)."""
        c = self.cfg
        splits = self.restrict_train(load_splits(c.dataset, data_root, c.train_split, c.val_split))
        tf = self.transform()
        kw = dict(n_last_blocks=c.n_last_blocks, final_norm=True, batch_size=c.batch_size, num_workers=c.num_workers,
                  cache=c.cache, progress=c.progress, precision=c.precision)
        f_train = extract_features(model, splits.train, tf, desc="knn train", **kw)
        f_val = extract_features(model, splits.val, tf, desc="knn val", **kw)
        return splits, f_train, f_val

    def examples(self, model: ModelHandle, data_root: Path, count: int = 4, seed: int = 0) -> list[Example]:
        """Val images drawn with ``seed``: the image as the model saw it, its class, the class the
        smallest k of the sweep votes for, and its three nearest training images."""
        c = self.cfg
        splits, f_train, f_val = self.extract(model, data_root)
        items = chosen_items(len(splits.val), count, seed)
        train = feature_for(c.feature, f_train.cls, f_train.patch_mean, c.n_last_blocks)
        val = feature_for(c.feature, f_val.cls[items], f_val.patch_mean[items], c.n_last_blocks)
        k = min(min(c.ks), len(splits.train_labels))
        sims, idx = cosine_topk(train, val, k, backend="torch")
        labels = torch.as_tensor(splits.train_labels)
        predicted = class_scores(sims, labels[idx], k, c.temperature, splits.num_classes).argmax(1).tolist()
        tf = self.transform()

        def seen(reader, i):
            return seen_by_model(tf(reader.load_image(i)), tf.mean, tf.std)

        out = []
        for row, (i, p) in enumerate(zip(items, predicted)):
            truth = splits.classes[int(splits.val_labels[i])]
            panels = [Panel("input", image=seen(splits.val, i)), Panel("target", kind="text", text=truth),
                      Panel(f"k={k} vote", kind="text", text=splits.classes[p])]
            panels += [Panel(f"neighbour {j + 1}", image=seen(splits.train, int(idx[row, j])),
                             text=f"{splits.classes[int(labels[idx[row, j]])]} ({float(sims[row, j]):.2f})")
                       for j in range(min(3, k))]
            out.append(Example(f"val {i}", panels, correct=splits.classes[p] == truth))
        return out

    def chance_results(self, data_root: Path) -> list[ProtocolResult]:
        """The chance row's records (harness.context.chance): a uniform guess, per k."""
        c = self.cfg
        splits = load_splits(c.dataset, data_root, c.train_split, c.val_split)
        return [ProtocolResult(metrics=uniform_topk(splits.num_classes), dataset=c.dataset, split=c.val_split,
                               seed=None, variant={"k": k, "feature": c.feature},
                               params={"chance": "uniform random guess", "num_classes": splits.num_classes,
                                       "n_val": len(splits.val)})
                for k in c.ks]

    def run(self, model: ModelHandle, data_root: Path) -> list[ProtocolResult]:
        c = self.cfg
        t0 = time.perf_counter()
        splits, f_train, f_val = self.extract(model, data_root)
        t_feat = time.perf_counter() - t0

        def train_rows(a: int, b: int) -> torch.Tensor:
            return feature_for(c.feature, f_train.cls[a:b], f_train.patch_mean[a:b], c.n_last_blocks)

        train = Rows(None, n=len(f_train), fn=train_rows)
        val = feature_for(c.feature, f_val.cls, f_val.patch_mean, c.n_last_blocks)
        search_dev = self.search_device(model)
        t1 = time.perf_counter()
        res = weighted_knn(train, splits.train_labels, val, splits.val_labels, ks=c.ks,
                           temperature=c.temperature, num_classes=splits.num_classes, backend=c.backend,
                           train_chunk=c.train_chunk, test_chunk=c.test_chunk, device=search_dev,
                           per_image=True)
        t_search = time.perf_counter() - t1
        out = []
        for k in c.ks:
            r = res[k]
            if r["k_used"] != k:
                log.warning("k=%d is larger than the %d training images: every training image votes",
                            k, len(f_train))
            out.append(ProtocolResult(
                metrics={m: v for m, v in r.items() if m not in ("k_used", "per_image")},
                per_image=r["per_image"],
                dataset=c.dataset, split=c.val_split, seed=None,
                variant={"k": k, "feature": c.feature},
                params={"k_used": r["k_used"], "temperature": c.temperature, "n_last_blocks": c.n_last_blocks,
                        "feature_dim": int(val.shape[1]), "n_train": len(f_train), "n_val": len(f_val),
                        "num_classes": splits.num_classes, "backend": resolved_backend(c.backend, search_dev),
                        "search_device": str(search_dev),
                        "transform": f"resize {c.resize} {c.interpolation} -> center crop {c.crop}",
                        "features_from_cache": bool(f_train.from_cache and f_val.from_cache),
                        "feature_seconds": round(t_feat, 3), "search_seconds": round(t_search, 3),
                        **self.train_subset_params()},
            ))
        return out
