"""Scoring a trained linear head on each shifted set: one function per kind of set, each giving
ProtocolResults with per-image hits (or per-image mCE shares) for the intervals."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import torch

from benchmarks.robustness import class_maps, corruption
from harness.data.classification import ImageFolderDataset
from harness.data.imagenet_real import real_label_sets
from harness.data.imagenet_shifts import BackgroundsChallenge, ImageNetC, ImageNetV2
from harness.errors import DataError
from harness.per_image import accuracy_percent, hits_block, means_block
from harness.protocol import ProtocolResult


@dataclass
class Scorer:
    """What every set is scored with: ``logits(source, transform, desc)`` -> (N, C) of the chosen
    head, the training classes, and the result's common fields: every result carries the run's
    dataset and validation split (the data root the head was trained on); the set is the variant."""

    logits: Callable[..., torch.Tensor]
    train_classes: list[str]
    seed: int
    dataset: str
    split: str

    def result(self, shift: str, hits: np.ndarray, set_name: str, set_split: str, **params) -> ProtocolResult:
        hits = np.asarray(hits, dtype=bool)
        if hits.size == 0:
            raise DataError(f"robustness {shift}: no image to score in {set_name} ({set_split})")
        params = {"set": set_name, "set_split": set_split, **params}
        return ProtocolResult(metrics={"top1": float(accuracy_percent(hits.sum(), hits.size))}, dataset=self.dataset,
                              split=self.split, seed=self.seed, variant={"shift": shift},
                              per_image=hits_block({"top1": hits}), params={"n_images": int(hits.size), **params})


def _argmax(logits: torch.Tensor) -> np.ndarray:
    return logits.argmax(dim=1).cpu().numpy()


def score_subset(scorer: Scorer, shift: str, root: Path, transform) -> ProtocolResult:
    """ImageNet-A / -R (200 classes: argmax over their columns) and ImageNet-Sketch (all of them):
    wnid folders, each a training class."""
    data = ImageFolderDataset(root, None)
    cols = class_maps.subset_indices(data.classes, scorer.train_classes, str(root))
    logits = scorer.logits(data, transform, shift)
    # the argmax over the set's columns is an index into the set's classes (all of them: Sketch)
    pred = _argmax(logits[:, torch.from_numpy(cols).to(logits.device)])
    hits = pred == np.asarray(data.targets)
    return scorer.result(shift, hits, shift, "val", n_classes=len(cols), set_root=str(root),
                         set_fingerprint=data.fingerprint())


def score_v2(scorer: Scorer, root: Path, transform) -> ProtocolResult:
    data = ImageNetV2(root, None)
    labels = class_maps.v2_labels(data.classes, data.targets, len(scorer.train_classes), str(root))
    hits = _argmax(scorer.logits(data, transform, "v2")) == labels
    return scorer.result("v2", hits, "imagenet_v2", "val", set_root=str(root), set_fingerprint=data.fingerprint())


def score_real(scorer: Scorer, val, transform, labels_path: Path) -> ProtocolResult:
    sets = real_label_sets(val.image_paths, class_maps.read_real_labels(labels_path), str(labels_path))
    kept, hits = class_maps.real_hits(_argmax(scorer.logits(val, transform, "real")), sets)
    return scorer.result("real", hits, "imagenet_real", "val", n_without_labels=int((~kept).sum()))


def _remap(data, train_classes: list[str], where: str) -> np.ndarray:
    index = {c: i for i, c in enumerate(train_classes)}
    missing = [c for c in data.classes if c not in index]
    if missing:
        raise DataError(f"{where}: class folder(s) {', '.join(missing[:5])} are not training classes")
    return np.array([index[c] for c in data.classes], dtype=np.int64)[np.asarray(data.targets)]


def score_corruptions(scorer: Scorer, root: Path, transform, corruptions, severities, normalizer: str):
    """One result: the mCE over ``corruptions`` with its per-image shares; each CE in params."""
    misses, errors, stems = {}, {}, None
    for c in corruptions:
        rows = []
        for s in severities:
            data = ImageNetC(root, f"{c}/{s}")
            if stems is None:
                stems = data.stems
            elif data.stems != stems:
                raise DataError(f"ImageNet-C {root / c / str(s)}: its images differ from {root / corruptions[0]}/"
                                f"{severities[0]}'s; every corruption and severity holds the same images")
            rows.append(_argmax(scorer.logits(data, transform, f"{c}/{s}")) != _remap(data, scorer.train_classes,
                                                                                       str(root / c / str(s))))
        misses[c] = np.stack(rows)
        errors[c] = [float(r.mean()) for r in rows]
    shares = corruption.per_image_shares(misses, normalizer)
    ces = corruption.corruption_errors(errors, normalizer)
    return ProtocolResult(metrics={"mCE": corruption.mean_corruption_error(errors, normalizer)},
                          dataset=scorer.dataset, split=scorer.split, seed=scorer.seed, variant={"shift": "imagenet_c"},
                          per_image=means_block({"mCE": shares}),
                          params={"ce_normalizer": normalizer, "corruption_errors": ces, "errors": errors,
                                  "n_images": len(stems), "set_root": str(root)})


def score_backgrounds(scorer: Scorer, root: Path, transform, variants, mapping: str) -> list[ProtocolResult]:
    """Each variant's accuracy of the 1000-way argmax mapped to the nine classes."""
    out = []
    for v in variants:
        data = BackgroundsChallenge(root, v)
        if mapping == "madrylab":
            if len(data.classes) != 9 or len(scorer.train_classes) != class_maps.IN9_NUM_IMAGENET:
                raise DataError(f"{root / v}: in9_mapping madrylab maps 1000 ImageNet classes to the 9 IN-9 "
                                f"folders; found {len(scorer.train_classes)} training classes and "
                                f"{len(data.classes)} folders (a set labelled with training names: by_name)")
            table = class_maps.in9_table()
        else:
            table = class_maps.class_table_by_name(data.classes, scorer.train_classes, str(root / v))
        hits = table[_argmax(scorer.logits(data, transform, f"bg {v}"))] == np.asarray(data.targets)
        out.append(scorer.result(f"bg_{v}", hits, "backgrounds_challenge", v, in9_mapping=mapping))
    return out
