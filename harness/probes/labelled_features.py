"""What the protocols that classify frozen image features (k-NN, linear probe, logistic regression,
robustness) share: reading the two splits with aligned labels, turning stored features into the
probe's input vector, and counting top-k hits with one tie rule."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np
import torch

from harness.errors import ConfigError, DataError
from harness.per_image import accuracy_percent, hits_block
from harness.registry import DATASETS

FeatureKind = Literal["cls", "avgpool", "cls+avgpool"]
Layout = Literal["concat", "interleave"]


@dataclass
class ClassificationSplits:
    train: object  # a dataset reader (ImageFolderDataset or any reader with the same API)
    val: object
    train_labels: np.ndarray  # (N_train,) int64 in [0, num_classes)
    val_labels: np.ndarray  # (N_val,) int64, in the train split's class indices
    classes: list[str]

    @property
    def num_classes(self) -> int:
        return len(self.classes)


def load_splits(dataset: str, data_root: str | Path, train_split: str, val_split: str) -> ClassificationSplits:
    """Both splits of an ImageFolder-style dataset, val labels expressed in train's class indices.

    ImageFolder numbers classes by sorted folder name per split, so a val folder that lacks
    a class would shift every later label; labels are matched by class name instead."""
    reader = DATASETS.get(dataset)
    train = reader(data_root, train_split)
    val = reader(data_root, val_split)
    if len(train) == 0 or len(val) == 0:
        raise DataError(f"{dataset} at {data_root}: found {len(train)} {train_split!r} and {len(val)} "
                        f"{val_split!r} images; both splits need images")
    classes = list(train.classes)
    index = {name: i for i, name in enumerate(classes)}
    missing = [c for c in val.classes if c not in index]
    if missing:
        raise DataError(f"{dataset} at {data_root}: {val_split!r} has class folder(s) "
                        f"{', '.join(missing[:10])} that {train_split!r} lacks; a classifier trained on "
                        f"{train_split!r} can never predict them (remove them or add training images)")
    remap = np.array([index[c] for c in val.classes], dtype=np.int64)
    train_labels = np.asarray(train.targets, dtype=np.int64)
    val_labels = remap[np.asarray(val.targets, dtype=np.int64)]
    return ClassificationSplits(train, val, train_labels, val_labels, classes)


def assemble(cls: torch.Tensor | np.ndarray, patch_mean: torch.Tensor | np.ndarray, *, n_last_blocks: int,
             avgpool: bool, layout: Layout = "concat", cls_token: bool = True) -> torch.Tensor:
    """Probe input from per-block features (B, n_blocks, d) as stored by harness.features.extract.

    - CLS of the last ``n_last_blocks`` blocks, concatenated oldest first (DINO/iBOT
      ``torch.cat([x[:, 0] for x in intermediate_output], -1)``);
    - with ``avgpool``, the mean of the last block's final-normed patch tokens is appended
      (iBOT ``avgpool_patchtokens=2``: plain concatenation), or, with ``layout="interleave"``,
      interleaved element-wise with the CLS token as DINO's eval_linear.py does
      (``cat((cls.unsqueeze(-1), avg.unsqueeze(-1)), -1).reshape(B, -1)``, n = 1 only).
    - ``cls_token=False`` gives the patch mean alone (k-NN ``feature="avgpool"``).
    """
    cls, patch_mean = _tensor(cls), _tensor(patch_mean)
    b, stored, d = cls.shape
    if not 1 <= n_last_blocks <= stored:
        raise ValueError(f"asked for the last {n_last_blocks} blocks, the features hold {stored}")
    avg = patch_mean[:, -1].float()
    if not cls_token:
        return avg.contiguous()
    parts = cls[:, stored - n_last_blocks:].float().reshape(b, n_last_blocks * d)
    if not avgpool:
        return parts.contiguous()
    if layout == "interleave":
        if n_last_blocks != 1:
            raise ConfigError("DINO's interleaved CLS/avgpool layout exists only with n_last_blocks=1 "
                              f"(its torch.cat fails otherwise), found n_last_blocks={n_last_blocks}")
        return torch.stack([parts, avg], dim=-1).reshape(b, 2 * d)
    return torch.cat([parts, avg], dim=1)


def _tensor(x) -> torch.Tensor:
    if isinstance(x, torch.Tensor):
        return x
    return torch.from_numpy(np.array(x, dtype=np.float32))  # a copy: cached features are read-only memmaps


def feature_for(kind: FeatureKind, cls, patch_mean, n_last_blocks: int = 1) -> torch.Tensor:
    """k-NN feature choice: "cls" | "avgpool" | "cls+avgpool" (iBOT's avgpool 0 / 1-on-normed / 2)."""
    if kind == "cls":
        return assemble(cls, patch_mean, n_last_blocks=n_last_blocks, avgpool=False)
    if kind == "avgpool":
        return assemble(cls, patch_mean, n_last_blocks=1, avgpool=False, cls_token=False)
    if kind == "cls+avgpool":
        return assemble(cls, patch_mean, n_last_blocks=n_last_blocks, avgpool=True)
    raise ConfigError(f"feature must be 'cls', 'avgpool' or 'cls+avgpool', found {kind!r}")


def target_rank(scores: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Rank of the target class in each row (0 = predicted first).

    Classes are ordered by score, highest first; exactly equal scores are ordered by the
    lower class index first (the order a stable descending sort gives). A row with a
    non-finite score gets a rank no k reaches (never a hit): a diverged head is wrong.
    """
    s_t = scores.gather(1, targets.view(-1, 1))
    c = scores.shape[1]
    before = torch.arange(c, device=scores.device).view(1, -1) < targets.view(-1, 1)
    rank = (scores > s_t).sum(1) + ((scores == s_t) & before).sum(1)
    finite = torch.isfinite(scores).all(1)
    return torch.where(finite, rank, torch.full_like(rank, torch.iinfo(rank.dtype).max))


def topk_hit_flags(scores: torch.Tensor, targets: torch.Tensor, ks=(1, 5),
                   require_positive: bool = False) -> dict[int, torch.Tensor]:
    """Per row, whether its target is among the top-k classes, for each k: {k: (B,) bool}.

    ``require_positive``: a class whose score is not > 0 never counts (k-NN: a class that
    received no vote is not a prediction, whatever order a sort leaves the zeros in)."""
    rank = target_rank(scores, targets)
    ok = torch.ones_like(rank, dtype=torch.bool)
    if require_positive:
        ok = scores.gather(1, targets.view(-1, 1)).squeeze(1) > 0
    return {k: (rank < k) & ok for k in ks}


def topk_hits(scores: torch.Tensor, targets: torch.Tensor, ks=(1, 5), require_positive: bool = False) -> dict[int, int]:
    """Number of rows whose target is among the top-k classes, for each k (see topk_hit_flags)."""
    return {k: int(f.sum()) for k, f in topk_hit_flags(scores, targets, ks, require_positive).items()}


def accuracy_metrics(hits: dict[int, int], total: int, num_classes: int) -> dict[str, float]:
    """Percentages as DINO computes them (count * 100.0 / total). Top-5 only with >= 5
    classes (as DINO's eval_linear.py; with fewer it is trivially 100 or undefined)."""
    out = {"top1": accuracy_percent(hits[1], total)}
    if num_classes >= 5:
        out["top5"] = accuracy_percent(hits[5], total)
    return out


def accuracy_per_image(flags: dict[int, np.ndarray], num_classes: int) -> dict:
    """The record's ``per_image`` block (harness.per_image) of the metrics accuracy_metrics
    reports, from per-image top-k flags {1: (N,), 5: (N,)}."""
    hits = {"top1": flags[1]}
    if num_classes >= 5:
        hits["top5"] = flags[5]
    return hits_block(hits)
