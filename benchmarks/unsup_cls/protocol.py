"""Unsupervised classification (iBOT Table 5; bytedance/ibot evaluation/unsupervised/unsup_cls.py).

The evaluation split (ImageNet val) goes through Resize(256, bicubic) -> CenterCrop(224) ->
ImageNet normalisation (unsup_cls.py ``main_eval``); each image gets a cluster and the clusters
are scored against the labels with ACC (Hungarian matching), ARI, NMI and FMI (``eval_pred``;
benchmarks.unsup_cls.metrics), reported in percent. Two assignments, each its own variant:

- ``head``: the argmax of the model's projection head on the final-normed CLS token
  (unsup_cls.py ``output.max(dim=1)[1]``; the head read from the official training checkpoint,
  benchmarks.unsup_cls.head). The official README asks for a head of out_dim = the number of
  classes ("to ensure one-to-one assignment"), and the official matching only works then: a head
  of another width is an error unless ``acc_matching: hungarian``;
- ``kmeans``: k-means with k = the number of classes on the L2-normalised CLS features of the
  same images, for every model (benchmarks.unsup_cls.kmeans).

A model without a head asked for ``head`` is refused (NotApplicable: the CLI prints one
``error:`` line and exits 2, a suite records the pair as not applicable).
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import numpy as np
import torch

from harness.data.transforms import ResizeCenterCrop
from harness.errors import ConfigError, DataError, NotApplicable
from harness.features.extract import extract_features
from harness.models.handle import ModelHandle
from harness.presets import load_presets
from harness.protocol import Protocol, ProtocolResult
from harness.registry import DATASETS, register_protocol

from benchmarks.unsup_cls.kmeans import kmeans_assign
from benchmarks.unsup_cls.metrics import AccUndefined, assignment_scores, contingency_of, scores
from benchmarks.unsup_cls.per_image_kind import clusters_block

log = logging.getLogger(__name__)
ASSIGNMENTS = ("head", "kmeans")


@dataclass
class UnsupClsConfig:
    dataset: str = "imagenet"
    split: str = "val"  # unsup_cls.py clusters ImageNet val
    resize: int = 256
    crop: int = 224
    interpolation: Literal["bicubic", "bilinear"] = "bicubic"
    assignments: list[str] = field(default_factory=lambda: ["head"])
    head_checkpoint: str = ""  # the official training checkpoint holding head.*; "" = the model's source_file
    head_branch: Literal["teacher", "student"] = "teacher"  # unsup_cls.py --checkpoint_key teacher
    trust_checkpoint: bool = False  # unpickle an official file holding argparse args (harness.models.importers)
    # official: get_y_preds as unsup_cls.py runs it, quirks kept; hungarian: the opt-in fix
    # (one-to-one matching on the contingency table, any number of clusters)
    acc_matching: Literal["official", "hungarian"] = "official"
    # unsup_cls.py gives its val loader no DistributedSampler: on the README's 8 GPUs
    # (run.sh imagenet_unsup_cls ... 8) every rank scores all of val and concat_all_gather stacks
    # 8 copies of labels and predictions. ACC and NMI do not change; ARI and FMI count pairs and
    # do. 8 = the published runs; 1 = each image once (the opt-in fix)
    gather_copies: int = 8
    kmeans_niter: int = 100
    kmeans_seed: int = 0
    precision: Literal["fp32", "fp16", "bf16"] = "fp32"
    batch_size: int = 64
    num_workers: int = 0
    cache: bool = True
    progress: bool = True

    def __post_init__(self):
        bad = [a for a in self.assignments if a not in ASSIGNMENTS]
        if not self.assignments or bad or len(set(self.assignments)) != len(self.assignments):
            raise ValueError(f"assignments must be distinct entries of {list(ASSIGNMENTS)}, found {self.assignments}")
        if self.gather_copies < 1:
            raise ValueError(f"gather_copies must be >= 1, found {self.gather_copies}")
        if self.kmeans_niter < 1 or self.crop > self.resize:
            raise ValueError(f"need kmeans_niter >= 1 and crop <= resize, found {self.kmeans_niter}, "
                             f"crop {self.crop}, resize {self.resize}")


@register_protocol("unsup_cls")
class UnsupClsProtocol(Protocol):
    """One ProtocolResult per assignment, variant {"assignment"}."""

    Config = UnsupClsConfig
    CONFORMANCE_RUN = ("synth", {"dataset": "imagefolder", "cache": False, "progress": False}, "imagenet")
    # the head file is identified by its sha256 (params) and must be the model's own
    NOT_IN_FINGERPRINT = ("assignments", "head_checkpoint", "trust_checkpoint", "batch_size", "num_workers",
                          "cache", "progress")
    PRESETS = load_presets("unsup_cls", Path(__file__).parent / "presets")
    DEFAULT_PRESET = "ibot"

    def transform(self) -> ResizeCenterCrop:
        c = self.cfg
        return ResizeCenterCrop(resize=c.resize, crop=c.crop, interpolation=c.interpolation)

    def split(self, data_root: Path):
        c = self.cfg
        reader = DATASETS.get(c.dataset)(data_root, c.split)
        labels = np.asarray(reader.targets, dtype=np.int64)
        if len(labels) == 0:
            raise DataError(f"{c.dataset} at {data_root}: no {c.split!r} images to cluster")
        return reader, labels, len(reader.classes)

    def head(self, model: ModelHandle, num_classes: int):
        from benchmarks.unsup_cls.head import load_head

        c = self.cfg
        try:
            head = load_head(model, c.head_checkpoint, c.head_branch, c.trust_checkpoint)
        except ConfigError as exc:
            if "has no projection head" in str(exc):
                raise NotApplicable(str(exc)) from None
            raise
        if head.in_dim != model.backbone.embed_dim:
            raise ConfigError(f"{head.source}: head input width {head.in_dim} but the backbone's CLS has "
                              f"{model.backbone.embed_dim}")
        if head.out_dim != num_classes and c.acc_matching == "official":
            raise ConfigError(f"{head.source}: a {head.out_dim}-way head on {num_classes} classes; unsup_cls.py "
                              f"needs out_dim = the number of classes (ibot evaluation/README.md: 'to ensure "
                              f"one-to-one assignment'); pretrain with that out_dim, or set acc_matching=hungarian")
        return head

    def chance_results(self, data_root: Path) -> list[ProtocolResult]:
        """The chance row's records (harness.context.chance): one seeded uniform random cluster per
        image (k = the number of classes), scored as any assignment (ACC's expected value under
        matching is above 100 / classes, and ARI's is 0)."""
        c = self.cfg
        _, labels, num_classes = self.split(data_root)
        clusters = np.random.default_rng(0).integers(0, num_classes, len(labels))
        s = assignment_scores(labels, clusters, "hungarian" if c.acc_matching == "hungarian" else "official",
                              c.gather_copies)
        return [ProtocolResult(metrics={m: 100.0 * v for m, v in s.items()}, dataset=c.dataset, split=c.split,
                               seed=0, variant={"assignment": a},
                               params={"chance": "uniform random cluster per image, numpy default_rng(0)",
                                       "num_classes": num_classes, "n_images": int(len(labels))},
                               per_image=clusters_block(labels, clusters, matching=c.acc_matching,
                                                        copies=c.gather_copies))
                for a in c.assignments]

    def run(self, model: ModelHandle, data_root: Path) -> list[ProtocolResult]:
        c = self.cfg
        patch = int(model.backbone.patch_size)
        if c.crop % patch:
            lower, upper = max(patch, c.crop // patch * patch), (c.crop // patch + 1) * patch
            raise ConfigError(f"unsup_cls: crop {c.crop} is not a multiple of the stride {patch} of model "
                              f"{model.name}; set crop={lower} or {upper} (--set crop=N)")
        reader, labels, num_classes = self.split(data_root)
        head = self.head(model, num_classes) if "head" in c.assignments else None
        t0 = time.perf_counter()
        feats = extract_features(model, reader, self.transform(), n_last_blocks=1, final_norm=True,
                                 batch_size=c.batch_size, num_workers=c.num_workers, cache=c.cache,
                                 progress=c.progress, desc="unsup_cls", precision=c.precision)
        cls = np.asarray(feats.cls[:, -1], dtype=np.float32)
        t_feat = time.perf_counter() - t0
        out = []
        for a in c.assignments:
            t1 = time.perf_counter()
            params = {"n_images": int(len(labels)), "num_classes": num_classes, "acc_matching": c.acc_matching,
                      "gather_copies": c.gather_copies,
                      "transform": f"resize {c.resize} {c.interpolation} -> center crop {c.crop}",
                      "features_from_cache": bool(feats.from_cache)}
            if a == "head":
                clusters = head.assign(torch.from_numpy(cls.copy())).numpy().astype(np.int64)
                params.update(head_out_dim=head.out_dim, head_source=head.source, head_sha256=head.source_sha256,
                              head_branch=c.head_branch)
            else:
                clusters, objective = kmeans_assign(cls, num_classes, niter=c.kmeans_niter, seed=c.kmeans_seed)
                params.update(kmeans="faiss", kmeans_k=num_classes, kmeans_niter=c.kmeans_niter,
                              kmeans_seed=c.kmeans_seed, kmeans_objective=objective)
            out.append(self._result(a, labels, clusters, params, t_feat, time.perf_counter() - t1))
        return out

    def _result(self, assignment, labels, clusters, params, t_feat, t_assign) -> ProtocolResult:
        c = self.cfg
        undefined = {}
        try:
            s = assignment_scores(labels, clusters, c.acc_matching, c.gather_copies)
        except AccUndefined as exc:  # the official script stops there; the other scores still mean something
            s = {**scores(*contingency_of(labels, clusters, c.gather_copies)), "ACC": None}
            undefined["ACC"] = (f"{exc} (the {c.dataset} {c.split!r} split has images of {len(np.unique(labels))} "
                                "classes; acc_matching=hungarian scores any assignment)")
        params["clusters_used"] = int(len(np.unique(clusters)))
        return ProtocolResult(metrics={m: None if v is None else 100.0 * v for m, v in s.items()},
                              metrics_undefined=undefined, dataset=c.dataset, split=c.split,
                              seed=c.kmeans_seed if assignment == "kmeans" else None,
                              variant={"assignment": assignment}, params=params,
                              per_image=clusters_block(labels, clusters, matching=c.acc_matching,
                                                       copies=c.gather_copies),
                              cost={"extract_s": round(t_feat, 3), "assign_s": round(t_assign, 3)})
