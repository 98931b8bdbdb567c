"""Copy detection on Copydays (DINO Table 7): every query block searched among the originals
and the distractors, mAP of the top-20 lists; reported on the "strong" block, as DINO's
``eval_copy_detection.py`` does it:

- a square bicubic resize to ``imsize`` (DINO's script: 320; iBOT's copy: 224);
- the final-normed [CLS] token concatenated with the GeM (p = 4) of the final-normed patch tokens;
- whitening learned on ``whitening`` (the paper: 20k YFCC100M images), applied to database and
  queries; ``distractors`` (10k YFCC100M images) join the database;
- L2 normalisation, cosine similarity, top 20, the Holidays AP.

The script skips a whitening or distractor folder that does not exist; here a folder that is
set must exist (null skips it). benchmarks/retrieval/README.md gives the source of every default.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np

from benchmarks.retrieval.chance import expected_random_ap
from benchmarks.retrieval.common import extract_kwargs, patch_size, search_device, under_root
from benchmarks.retrieval.features import SquareBicubic, Whitening, gem, l2n
from benchmarks.retrieval.holidays_ap import block_aps
from benchmarks.retrieval.search import Bank, top_k
from harness.data.copydays import BLOCKS, STRONG, Copydays
from harness.data.image_list import ImageList, image_folder
from harness.errors import ConfigError
from harness.features.extract import extract_features
from harness.models.handle import ModelHandle
from harness.per_image import means_block
from harness.presets import load_presets
from harness.protocol import Protocol, ProtocolResult
from harness.registry import DATASETS, register_protocol


@dataclass
class Config:
    dataset: str = "copydays"
    preset: str | None = None
    imsize: int = 320                     # eval_copy_detection.py --imsize (DINO; iBOT's copy: 224)
    whitening: str | None = None          # --whitening_path, relative to the data root
    n_whitening: int | None = None        # the first n of its images, sorted (None: all)
    distractors: str | None = None        # --distractors_path
    n_distractors: int | None = None
    gem_p: float = 4.0                    # "GeM with exponent 4 for output patch tokens"
    whit: float = 0.5                     # utils.PCA(whit=0.5)
    top_k: int = 20                       # similarity.topk(20)
    bank_dtype: Literal["float32", "float16"] = "float32"
    precision: Literal["fp32", "fp16", "bf16"] = "fp32"
    # --- execution (not in the fingerprint)
    batch_size: int = 16
    num_workers: int = 0
    query_chunk: int = 256
    search_device: str = "auto"
    threads: int | None = None
    progress: bool = True

    def __post_init__(self):
        checks = [(self.imsize >= 1, "imsize must be >= 1"), (self.top_k >= 1, "top_k must be >= 1"),
                  (self.gem_p > 0, "gem_p must be > 0"),
                  (self.n_whitening is None or self.whitening is not None, "n_whitening needs whitening (a folder)"),
                  (self.n_distractors is None or self.distractors is not None,
                   "n_distractors needs distractors (a folder)")]
        for ok, msg in checks:
            if not ok:
                raise ValueError(msg)


PRESETS: dict[str, dict[str, Any]] = load_presets("copy_detection", Path(__file__).parent / "presets")


@register_protocol("copy_detection")
class CopyDetection(Protocol):
    Config = Config
    PRESETS = PRESETS
    DEFAULT_PRESET = "dino"
    NOT_IN_FINGERPRINT = ("batch_size", "num_workers", "query_chunk", "search_device", "threads", "progress")

    def features(self, model: ModelHandle, source, patch: int, desc: str) -> np.ndarray:
        """(N, 2d): [CLS] and GeM-pooled patch tokens, unnormalised."""
        c = self.cfg
        fs = extract_features(model, source, SquareBicubic(c.imsize, patch), n_last_blocks=1, final_norm=True,
                              patches=True, desc=desc, **extract_kwargs(c))
        pooled = np.stack([gem(fs.patches(i)[0], c.gem_p) for i in range(len(fs))])
        return np.concatenate([np.asarray(fs.cls[:, 0], dtype=np.float32), pooled], axis=1)

    def score(self, q: np.ndarray, db: np.ndarray, whitening: np.ndarray | None, queries: Copydays,
              device="cpu") -> dict[str, np.ndarray]:
        """Per block, per query AP from raw features: whitening (when given) learned on
        ``whitening`` and applied to both sides, L2, top-k, the Holidays AP."""
        c = self.cfg
        if whitening is not None:
            w = Whitening.learn(whitening, c.whit)
            db, q = w.apply(db), w.apply(q)
        _, ids = top_k(Bank.build(l2n(db), c.bank_dtype, device), l2n(q), c.top_k, chunk=c.query_chunk)
        slices = queries.block_slices()
        return {b: block_aps(ids[slices[b]], queries.positives[b]) for b in BLOCKS}

    def folder(self, data_root: Path, setting: str | None, limit: int | None, what: str) -> ImageList | None:
        if setting is None:
            return None
        path = under_root(data_root, setting)
        return ImageList(path, image_folder(path, limit, what), what)

    def chance_results(self, data_root: Path) -> list[ProtocolResult]:
        """The chance row (harness.context.chance): each strong query's exact expected AP when its
        top-k list is a uniformly random draw from the originals and distractors
        (benchmarks.retrieval.chance, cut at ``top_k``)."""
        c = self.cfg
        if DATASETS.get(c.dataset) is not Copydays:
            raise ConfigError(f"copy_detection reads copydays, not {c.dataset!r}")
        queries, originals = Copydays(data_root, "query"), Copydays(data_root, "database")
        distractors = self.folder(data_root, c.distractors, c.n_distractors, "distractors")
        n_bank = len(originals) + (len(distractors) if distractors is not None else 0)
        strong = queries.positives[STRONG]
        aps = [expected_random_ap(n_bank, len(set(pos)), len(pos), cutoff=c.top_k) for pos in strong]
        return [ProtocolResult(
            metrics={"mAP_strong": 100.0 * float(np.mean(aps))}, dataset=c.dataset, split=STRONG, seed=None,
            variant={"imsize": c.imsize},
            params={"chance": "uniformly random top-k list (exact expected AP)", "n_queries": len(strong),
                    "n_bank": n_bank})]

    def run(self, model: ModelHandle, data_root: Path) -> list[ProtocolResult]:
        c = self.cfg
        if DATASETS.get(c.dataset) is not Copydays:
            raise ConfigError(f"copy_detection reads copydays, not {c.dataset!r}")
        patch = patch_size(model, c.imsize, "copy_detection")
        queries, originals = Copydays(data_root, "query"), Copydays(data_root, "database")
        whitening = self.folder(data_root, c.whitening, c.n_whitening, "whitening")
        distractors = self.folder(data_root, c.distractors, c.n_distractors, "distractors")
        model.backbone.eval()
        t0 = time.perf_counter()
        q = self.features(model, queries, patch, "copydays queries")
        db = [self.features(model, originals, patch, "copydays originals")]
        if distractors is not None:
            db.append(self.features(model, distractors, patch, "distractors"))
        db = np.concatenate(db)
        w = self.features(model, whitening, patch, "whitening") if whitening is not None else None
        t1 = time.perf_counter()
        aps = self.score(q, db, w, queries, search_device(model, c.search_device))
        t2 = time.perf_counter()
        return [ProtocolResult(
            metrics={"mAP_strong": 100.0 * float(aps[STRONG].mean())}, dataset=c.dataset, split=STRONG, seed=None,
            variant={"imsize": c.imsize}, per_image=means_block({"mAP_strong": aps[STRONG]}, scale=100.0),
            params={"mAP_per_block": {b: round(100.0 * float(a.mean()), 4) for b, a in aps.items()},
                    "n_queries": len(queries), "n_originals": len(originals),
                    "n_distractors": len(distractors) if distractors is not None else 0,
                    "n_whitening": len(whitening) if whitening is not None else 0, "bank_dtype": c.bank_dtype},
            cost={"extract_s": round(t1 - t0, 3), "search_s": round(t2 - t1, 3)})]
