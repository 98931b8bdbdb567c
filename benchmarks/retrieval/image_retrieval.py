"""Image retrieval on revisited Oxford and Paris (iBOT Table 16, DINO Table 5): frozen
features of every database and query image, cosine similarity, mAP for the Easy, Medium and
Hard setups of revisitop. By default as DINO's ``eval_image_retrieval.py`` does it:

- queries are the **full** query images (the script reads ``qimlist`` without cropping by
  ``bbx``); ``crop_queries: true`` crops them as revisitop's protocol asks (a deliberate,
  named difference, in the fingerprint);
- ``imsize`` (224) bounds the longer side through PIL's ``thumbnail``; ``multiscale`` averages
  the [CLS] token over scales 1, 1/sqrt(2), 1/2;
- Medium and Hard as the script builds them, Easy as revisitop's example_evaluate.py
  (the script prints M and H only);
- ``distractors``: the +1M option (revisitop1m's layout, or any image folder), an extension:
  the script has none.

benchmarks/retrieval/README.md gives the source line of every default.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np

from benchmarks.retrieval.chance import expected_random_ap
from benchmarks.retrieval.common import extract_kwargs, patch_size, search_device, under_root
from benchmarks.retrieval.features import MULTISCALES, ThumbnailScale, combine_scales, l2n
from benchmarks.retrieval.revisitop import DIFFICULTIES, difficulty_gnd, mean_ap, query_ap
from benchmarks.retrieval.search import Bank, labelled_ranks
from harness.data.image_list import ImageList, image_folder
from harness.data.revisited import RevisitedDataset
from harness.errors import ConfigError
from harness.features.extract import extract_features
from harness.models.handle import ModelHandle
from harness.per_image import means_block
from harness.presets import load_presets
from harness.protocol import Protocol, ProtocolResult
from harness.registry import DATASETS, register_protocol

METRIC_OF = {"easy": "mAP_E", "medium": "mAP_M", "hard": "mAP_H"}


@dataclass
class Config:
    dataset: str = "roxford5k"            # roxford5k | rparis6k
    preset: str | None = None
    imsize: int = 224                     # eval_image_retrieval.py --imsize
    multiscale: bool = False              # --multiscale
    crop_queries: bool = False            # revisitop's query crop (the script does not crop)
    distractors: str | None = None        # folder of distractors (+1M), relative to the data root
    max_distractors: int | None = None    # the first n of them (None: all)
    bank_dtype: Literal["float32", "float16"] = "float32"
    precision: Literal["fp32", "fp16", "bf16"] = "fp32"
    # --- execution (not in the fingerprint)
    batch_size: int = 16
    num_workers: int = 0
    query_chunk: int = 16
    search_device: str = "auto"
    threads: int | None = None
    progress: bool = True

    def __post_init__(self):
        if self.imsize < 1:
            raise ValueError(f"imsize must be >= 1, found {self.imsize}")
        if self.max_distractors is not None and self.max_distractors < 1:
            raise ValueError("max_distractors must be >= 1 or null")
        if self.max_distractors is not None and self.distractors is None:
            raise ValueError("max_distractors needs distractors (a folder)")


PRESETS: dict[str, dict[str, Any]] = load_presets("image_retrieval", Path(__file__).parent / "presets")


@register_protocol("image_retrieval")
class ImageRetrieval(Protocol):
    Config = Config
    PRESETS = PRESETS
    DEFAULT_PRESET = "dino"
    NOT_IN_FINGERPRINT = ("batch_size", "num_workers", "query_chunk", "search_device", "threads", "progress")

    def datasets(self, data_root: Path) -> tuple[RevisitedDataset, RevisitedDataset]:
        reader = DATASETS.get(self.cfg.dataset)
        if not (isinstance(reader, type) and issubclass(reader, RevisitedDataset)):
            raise ConfigError(f"image_retrieval reads roxford5k or rparis6k, not {self.cfg.dataset!r}")
        return (reader(data_root, "database"),
                reader(data_root, "query", crop_queries=self.cfg.crop_queries))

    def features(self, model: ModelHandle, source, patch: int, desc: str) -> np.ndarray:
        """L2-normalised (N, d): the [CLS] token, summed over the scales when multiscale."""
        c = self.cfg
        scales = MULTISCALES if c.multiscale else (1.0,)
        per_scale = [extract_features(model, source, ThumbnailScale(c.imsize, s, patch), n_last_blocks=1,
                                      final_norm=True, desc=f"{desc} x{s:.2f}", **extract_kwargs(c)).cls[:, 0]
                     for s in scales]
        return combine_scales(per_scale) if c.multiscale else l2n(per_scale[0])

    def distractor_list(self, data_root: Path) -> ImageList | None:
        c = self.cfg
        if c.distractors is None:
            return None
        folder = under_root(data_root, c.distractors)
        return ImageList(folder, image_folder(folder, c.max_distractors, "distractor"), "distractors")

    def chance_results(self, data_root: Path) -> list[ProtocolResult]:
        """The chance row (harness.context.chance): each query's exact expected AP under a uniformly
        random ranking of the database (and distractors), junk images left out as in the ranking's AP
        (benchmarks.retrieval.chance); the mean over the queries that have positives."""
        c = self.cfg
        database, queries = self.datasets(data_root)
        distractors = self.distractor_list(data_root)
        n_bank = len(database) + (len(distractors) if distractors is not None else 0)
        metrics = {}
        for d, gnd in ((d, difficulty_gnd(database.gnd, d)) for d in DIFFICULTIES):
            aps = [expected_random_ap(n_bank - len(np.setdiff1d(g["junk"], g["ok"])), len(np.unique(g["ok"])),
                                      len(g["ok"])) for g in gnd if len(g["ok"])]
            metrics[METRIC_OF[d]] = 100.0 * float(np.mean(aps)) if aps else float("nan")
        return [ProtocolResult(
            metrics=metrics, dataset=c.dataset, split="query", seed=None,
            variant={"multiscale": c.multiscale, "imsize": c.imsize},
            params={"chance": "uniformly random ranking (exact expected AP)", "n_queries": len(queries),
                    "n_bank": n_bank})]

    def run(self, model: ModelHandle, data_root: Path) -> list[ProtocolResult]:
        c = self.cfg
        patch = patch_size(model, c.imsize, "image_retrieval")
        database, queries = self.datasets(data_root)
        distractors = self.distractor_list(data_root)
        model.backbone.eval()
        t0 = time.perf_counter()
        bank = [self.features(model, database, patch, f"{c.dataset} database")]
        if distractors is not None:
            bank.append(self.features(model, distractors, patch, "distractors"))
        q = self.features(model, queries, patch, f"{c.dataset} queries")
        t1 = time.perf_counter()
        aps = self.search(np.concatenate(bank), q, database.gnd, search_device(model, c.search_device))
        t2 = time.perf_counter()
        metrics = {METRIC_OF[d]: 100.0 * mean_ap(aps[d]) for d in DIFFICULTIES}
        complete = {METRIC_OF[d]: aps[d] for d in DIFFICULTIES if not np.isnan(aps[d]).any()}
        return [ProtocolResult(
            metrics=metrics, dataset=c.dataset, split="query", seed=None,
            variant={"multiscale": c.multiscale, "imsize": c.imsize},
            per_image=means_block(complete, scale=100.0) if complete else None,
            params={"n_queries": len(queries), "n_database": len(database),
                    "n_distractors": len(distractors) if distractors is not None else 0,
                    "crop_queries": c.crop_queries, "bank_dtype": c.bank_dtype,
                    "queries_without_positives": {METRIC_OF[d]: int(np.isnan(aps[d]).sum()) for d in DIFFICULTIES}},
            cost={"extract_s": round(t1 - t0, 3), "search_s": round(t2 - t1, 3)})]

    def search(self, bank_feats: np.ndarray, queries: np.ndarray, gnd: list[dict], device) -> dict[str, np.ndarray]:
        """Per-query AP for each setup: where each labelled image lands in the query's ranking."""
        c = self.cfg
        bank = Bank.build(bank_feats, c.bank_dtype, device)
        labelled = [np.concatenate([np.asarray(g[k], dtype=np.int64).reshape(-1) for k in ("easy", "hard", "junk")])
                    for g in gnd]
        rank_of = labelled_ranks(bank, queries, labelled, chunk=c.query_chunk)
        out = {}
        for d in DIFFICULTIES:
            out[d] = np.array([query_ap(r, g["ok"], g["junk"]) for r, g in zip(rank_of, difficulty_gnd(gnd, d))])
        return out
