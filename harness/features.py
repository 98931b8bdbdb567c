"""Feature extraction: batched, with a progress bar, and a content-addressed cache.

One extraction per (weights sha256, dataset file list, transform, layer choice) is
kept on disk; a second request with the same key memory-maps the stored arrays.
Patch tokens are streamed to disk as they are computed, so extracting a large
dataset needs memory for a few batches, not for the whole set.

Two engines compute the same features (fp32: equal to 1e-5; in practice bit-identical):

- ``"threads"`` (default on CPU): torch's intra-op parallelism is set to one thread for the
  duration of the extraction and the batch is split across ``threads`` Python threads, each
  forwarding its share with single-threaded kernels (MKL GEMM, flash attention), while
  separate loader threads decode and transform the next batches (PIL and torch release the
  GIL). No OpenMP barriers: on a machine shared with other jobs a 2-thread OpenMP team
  spin-waits for whichever thread was descheduled, and small element-wise ops (the
  transform's normalisation, residual adds) become 10-100x slower; single-threaded kernels
  in independent threads keep every core busy with useful work. Decoding overlaps the
  forward, and the cache write of batch k overlaps the forward of batch k+1.
- ``"plain"``: the DataLoader in the calling thread, then one forward of the whole batch with
  torch's intra-op threads (the original path; benchmarks use it as the baseline).

See docs/BENCHMARKS.md for the measurements behind the choice.
"""
from __future__ import annotations

import json
import math
import shutil
import tempfile
import time
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Literal, Protocol as TypingProtocol

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset
from tqdm.auto import tqdm

from harness.config import fingerprint
from harness.models import ModelHandle
from harness.paths import feature_cache_dir

CACHE_VERSION = 1
Engine = Literal["threads", "plain"]
ENGINES = ("threads", "plain")
# Stage timings recorded in meta.json / FeatureSet.stages (seconds; see `_Stages`).
STAGE_KEYS = ("load_s", "transform_s", "forward_s", "write_s", "wait_s", "wall_s")


class ImageSource(TypingProtocol):
    def __len__(self) -> int: ...
    def load_image(self, i: int): ...
    def fingerprint(self) -> str: ...


@dataclass
class FeatureSet:
    """cls and patch_mean: (N, n_blocks, d); patches (optional): flat (P, n_blocks, d) with
    per-image offsets and (h, w) grids."""

    cls: np.ndarray
    patch_mean: np.ndarray
    grids: np.ndarray  # (N, 2)
    offsets: np.ndarray | None = None  # (N + 1,)
    patch_flat: np.ndarray | None = None
    key: str = ""
    from_cache: bool = False
    seconds: float = 0.0
    # How the extraction that produced this entry spent its time (see `_Stages`); empty for
    # cache entries written before stages were recorded.
    stages: dict = field(default_factory=dict)

    def __len__(self) -> int:
        return self.cls.shape[0]

    def patches(self, i: int) -> np.ndarray:
        """(n_blocks, h, w, d) patch tokens of image i."""
        if self.patch_flat is None:
            raise ValueError("patch tokens were not extracted (ask with patches=True)")
        h, w = self.grids[i]
        block = self.patch_flat[self.offsets[i]:self.offsets[i + 1]]
        return np.moveaxis(block.reshape(h, w, *block.shape[1:]), 2, 0)


class _Transformed(Dataset):
    def __init__(self, source: ImageSource, transform, indices):
        self.source, self.transform, self.indices = source, transform, indices
        # in-process timings (num_workers=0); worker processes keep their own copies
        self.load_s = self.transform_s = 0.0

    def __len__(self):
        return len(self.indices)

    def __getitem__(self, j):
        t0 = time.perf_counter()
        img = self.source.load_image(self.indices[j])
        t1 = time.perf_counter()
        x = self.transform(img)
        self.load_s += t1 - t0
        self.transform_s += time.perf_counter() - t1
        return x


def _collate_list(batch):
    return batch  # images may differ in size; grouped by shape in the forward


def feature_key(model: ModelHandle, source: ImageSource, transform, n_last_blocks: int, norm: bool,
                patches: bool, patch_dtype: str, precision: str = "fp32") -> str:
    return fingerprint({
        "v": CACHE_VERSION, "weights": model.cache_key, "data": source.fingerprint(),
        "transform": transform.fingerprint(), "n_last_blocks": n_last_blocks, "norm": norm,
        "patches": patches, "patch_dtype": patch_dtype, "precision": precision,
        "pos_interp": model.backbone.pos_interp,
    }, length=24)


def extract_features(model: ModelHandle, source: ImageSource, transform, *, n_last_blocks: int = 1,
                     norm: bool = True, patches: bool = False, patch_dtype: str = "float32",
                     batch_size: int = 64, num_workers: int = 0, cache: bool = True,
                     cache_dir: Path | None = None, progress: bool = True, desc: str = "features",
                     precision: str = "fp32") -> FeatureSet:
    key = feature_key(model, source, transform, n_last_blocks, norm, patches, patch_dtype, precision)
    root = Path(cache_dir or feature_cache_dir())
    final = root / key
    if cache and (final / "meta.json").is_file():
        return _load(final, key)
    root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=root, prefix=f".{key}."))
    try:
        t0 = time.perf_counter()
        _extract_into(tmp, model, source, transform, n_last_blocks, norm, patches, patch_dtype,
                      batch_size, num_workers, progress, desc, precision)
        meta = json.loads((tmp / "meta.json").read_text())
        meta["seconds"] = time.perf_counter() - t0
        (tmp / "meta.json").write_text(json.dumps(meta))
        if not cache:
            fs = _load(tmp, key, in_memory=True)
            shutil.rmtree(tmp, ignore_errors=True)
            return fs
        if final.exists():  # another process finished first; its result is identical
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            tmp.rename(final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    fs = _load(final, key)
    fs.from_cache = False
    return fs


@torch.inference_mode()
def _extract_into(out: Path, model, source, transform, n_last_blocks, norm, patches, patch_dtype,
                  batch_size, num_workers, progress, desc, precision):
    backbone = model.backbone.eval()
    n = len(source)
    loader = DataLoader(_Transformed(source, transform, list(range(n))), batch_size=batch_size,
                        shuffle=False, num_workers=num_workers, collate_fn=_collate_list,
                        persistent_workers=False)
    d = backbone.embed_dim
    cls = np.zeros((n, n_last_blocks, d), np.float32)
    pmean = np.zeros((n, n_last_blocks, d), np.float32)
    grids = np.zeros((n, 2), np.int64)
    offsets = np.zeros(n + 1, np.int64)
    patch_file = open(out / "patches.bin", "wb") if patches else None
    i = 0
    try:
        with tqdm(total=n, desc=desc, unit="img", disable=not progress, leave=False) as bar:
            for images in loader:
                batch_patches: dict[int, np.ndarray] = {}
                for group in _shape_groups(images):
                    x = torch.stack([images[j] for j in group])
                    c, pm, p = _forward(backbone, x, n_last_blocks, norm, precision)
                    b, _, h, w, _ = p.shape
                    idx = [i + j for j in group]
                    cls[idx] = c.numpy()
                    pmean[idx] = pm.numpy()
                    grids[idx] = (h, w)
                    if patch_file is not None:
                        flat = p.permute(0, 2, 3, 1, 4).reshape(b, h * w, n_last_blocks, d).numpy()
                        for k, j in enumerate(group):
                            batch_patches[j] = flat[k].astype(patch_dtype)
                if patch_file is not None:
                    # written in dataset order: shape groups may reorder a batch
                    for j in range(len(images)):
                        block = batch_patches[j]
                        patch_file.write(block.tobytes())
                        offsets[i + j + 1] = offsets[i + j] + block.shape[0]
                i += len(images)
                bar.update(len(images))
    finally:
        if patch_file is not None:
            patch_file.close()
    np.save(out / "cls.npy", cls)
    np.save(out / "patch_mean.npy", pmean)
    np.save(out / "grids.npy", grids)
    if patches:
        np.save(out / "offsets.npy", offsets)
    meta: dict[str, Any] = {"n": n, "n_last_blocks": n_last_blocks, "dim": d, "patches": patches,
                            "patch_dtype": patch_dtype, "total_patches": int(offsets[-1])}
    (out / "meta.json").write_text(json.dumps(meta))


def _forward(backbone, x: torch.Tensor, n_last_blocks: int, norm: bool, precision: str):
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16"):
        f = backbone.get_features(x, n_last_blocks=n_last_blocks, norm=norm)
    p = f.patches.float()  # (B, n, h, w, d)
    return f.cls.float(), p.mean(dim=(2, 3)), p


def batch_features(backbone, x: torch.Tensor, *, n_last_blocks: int = 1, norm: bool = True,
                   precision: str = "fp32") -> tuple[torch.Tensor, torch.Tensor]:
    """(cls, patch_mean), each (B, n_last_blocks, d), for one batch of images: exactly what
    `extract_features` stores, for protocols that must forward fresh (augmented) images
    every step, such as the linear probe. The caller owns no_grad and eval mode."""
    c, pm, _ = _forward(backbone, x, n_last_blocks, norm, precision)
    return c, pm


def _shape_groups(images: list[torch.Tensor]) -> list[list[int]]:
    groups: dict[tuple, list[int]] = {}
    for j, im in enumerate(images):
        groups.setdefault(tuple(im.shape), []).append(j)
    return list(groups.values())


def _load(path: Path, key: str, in_memory: bool = False) -> FeatureSet:
    meta = json.loads((path / "meta.json").read_text())
    mode = None if in_memory else "r"
    fs = FeatureSet(cls=np.load(path / "cls.npy", mmap_mode=mode),
                    patch_mean=np.load(path / "patch_mean.npy", mmap_mode=mode),
                    grids=np.load(path / "grids.npy"), key=key, from_cache=True,
                    seconds=meta.get("seconds", 0.0))
    if meta["patches"]:
        fs.offsets = np.load(path / "offsets.npy")
        shape = (meta["total_patches"], meta["n_last_blocks"], meta["dim"])
        if in_memory:
            fs.patch_flat = np.fromfile(path / "patches.bin", dtype=meta["patch_dtype"]).reshape(shape)
        else:
            fs.patch_flat = np.memmap(path / "patches.bin", dtype=meta["patch_dtype"], mode="r", shape=shape)
    return fs
