"""Feature extraction: batched, with a progress bar, through the content-addressed cache
(harness.features.cache), sharded over torchrun ranks.

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
import logging
import math
import shutil
import sys
import time
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset
from tqdm.auto import tqdm

from harness.runtime import device as devices
from harness.runtime import distributed as dist
from harness.io_utils import clean_stale_tempdirs, make_owned_tempdir
from harness.features.cache import feature_key, load_feature_set
from harness.features.contract import ENGINES, STAGE_KEYS, Engine, FeatureSet, ImageSource  # noqa: F401
from harness.models.handle import ModelHandle
from harness.paths import feature_cache_dir

log = logging.getLogger(__name__)



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


def extract_features(model: ModelHandle, source: ImageSource, transform, *, n_last_blocks: int = 1,
                     final_norm: bool = True, patches: bool = False, patch_dtype: str = "float32",
                     batch_size: int = 64, num_workers: int = 0, cache: bool = True,
                     cache_dir: Path | None = None, progress: bool = True, desc: str = "features",
                     precision: str = "fp32", engine: Engine = "threads",
                     threads: int | None = None) -> FeatureSet:
    """Features of every image of `source` (see the module docstring for `engine`).

    num_workers > 0 decodes in DataLoader worker processes instead of loader threads.
    threads: forward threads of the "threads" engine (default: torch.get_num_threads()).
    Neither changes the features, so neither is part of the cache key.

    Under torchrun every rank extracts a contiguous shard of the images and rank 0 joins the
    shards in order (`_extract_sharded`): the same arrays as one process.
    """
    if engine not in ENGINES:
        raise ValueError(f"engine must be one of {ENGINES}, found {engine!r}")
    devices.check_precision(precision, devices.module_device(model.backbone))
    if precision == "bf16":
        _warn_if_bf16_emulated(model)
    key = feature_key(model, source, transform, n_last_blocks, final_norm, patches, patch_dtype, precision)
    root = Path(cache_dir or feature_cache_dir())
    final = root / key
    if cache and (final / "meta.json").is_file():
        return load_feature_set(final, key)
    root.mkdir(parents=True, exist_ok=True)
    clean_stale_tempdirs(root)  # folders of killed extractions (any key); never a running one's
    args = (model, source, transform, n_last_blocks, final_norm, patches, patch_dtype, batch_size, num_workers,
            progress, desc, precision, engine, threads)
    if dist.world_size() > 1:
        if _leading and dist.is_main():  # the other ranks wait in serve_extractions
            dist.broadcast_object(("extract", (source, transform, dict(
                n_last_blocks=n_last_blocks, final_norm=final_norm, patches=patches, patch_dtype=patch_dtype,
                batch_size=batch_size, num_workers=num_workers, cache=cache, cache_dir=cache_dir,
                progress=False, desc=desc, precision=precision, engine=engine, threads=threads))))
        return _extract_sharded(root, key, cache, args)
    tmp = make_owned_tempdir(root, prefix=f".{key}.")
    try:
        t0 = time.perf_counter()
        _extract_into(tmp, *args)
        meta = json.loads((tmp / "meta.json").read_text())
        meta["seconds"] = time.perf_counter() - t0
        (tmp / "meta.json").write_text(json.dumps(meta))
        if not cache:
            fs = load_feature_set(tmp, key, in_memory=True)
            shutil.rmtree(tmp, ignore_errors=True)
            fs.from_cache = False
            return fs
        if final.exists():  # another process finished first; its result is identical
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            tmp.rename(final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    fs = load_feature_set(final, key)
    fs.from_cache = False
    if progress:
        tqdm.write(throughput_line(desc, len(fs), fs.stages), file=sys.stderr)
    return fs


def throughput_line(desc: str, n: int, stages: dict) -> str:
    """Images per second and the share of the wall time the forward waited for decoded images:
    a high share is an input-bound (starved) accelerator; raise the workers."""
    wall = max(stages.get("wall_s", 0.0), 1e-9)
    return (f"{desc}: {n} images in {wall:.1f} s ({n / wall:.0f} img/s; the forward waited for data "
            f"{stages.get('wait_s', 0.0) / wall:.0%} of the time)")


class _Shard:
    """Images [start, stop) of a source, as an ImageSource."""

    def __init__(self, source: ImageSource, start: int, stop: int):
        self.source, self.start, self.stop = source, start, stop
        self.thread_safe = getattr(source, "thread_safe", True)

    def __len__(self) -> int:
        return self.stop - self.start

    def load_image(self, i: int):
        return self.source.load_image(self.start + i)

    def fingerprint(self) -> str:
        return f"{self.source.fingerprint()}[{self.start}:{self.stop}]"


def shard_bounds(n: int, world: int, rank: int) -> tuple[int, int]:
    """Contiguous shard of rank `rank`: sizes differ by at most one image, in rank order."""
    base, extra = divmod(n, world)
    start = rank * base + min(rank, extra)
    return start, start + base + (1 if rank < extra else 0)


def _extract_sharded(root: Path, key: str, cache: bool, args: tuple) -> FeatureSet:
    """Each rank extracts its shard into ``<staging>/rank<r>``; rank 0 joins them. The staging
    folder is this extraction's own (another run of the same key may be staging beside it).
    The feature cache folder must be one folder for every rank (one node, or shared storage)."""
    source = args[1]
    world, rank = dist.world_size(), dist.rank()
    staging = make_owned_tempdir(root, prefix=f".{key}.shards_") if dist.is_main() else None
    staging = Path(dist.broadcast_object(str(staging) if staging is not None else None))
    t0 = time.perf_counter()
    start, stop = shard_bounds(len(source), world, rank)
    mine = staging / f"rank{rank}"
    mine.mkdir()
    progress = args[9] and dist.is_main()
    _extract_into(mine, args[0], _Shard(source, start, stop), *args[2:9], progress, *args[10:])
    dist.file_barrier()
    final = root / key
    out = final if cache else staging / "joined"
    try:
        if dist.is_main():
            shards = [staging / f"rank{r}" for r in range(world)]
            missing = [str(d) for d in shards if not (d / "meta.json").is_file()]
            if missing:
                raise RuntimeError(f"feature shards {missing} are not visible to rank 0: the feature cache "
                                   "must be on storage every rank shares (set SSL_BENCH_HOME there)")
            tmp = make_owned_tempdir(root, prefix=f".{key}.")
            _join_shards(shards, tmp, time.perf_counter() - t0)
            if out.exists():  # another run finished first; its result is identical
                shutil.rmtree(tmp)
            else:
                tmp.rename(out)
        dist.file_barrier()  # rank 0 alone joins: may take long (see FILE_WAIT_TIMEOUT)
        fs = load_feature_set(out, key, in_memory=not cache)
        fs.from_cache = False
        dist.file_barrier()  # every rank has read the joined arrays before they go
    finally:
        if dist.is_main():
            shutil.rmtree(staging, ignore_errors=True)
    return fs


# Rank 0 runs a protocol while the other ranks serve its feature extractions (evaluate.py).
_leading = False


@contextmanager
def leading_extractions():
    """On rank 0: each sharded extraction inside the block first tells the ranks waiting in
    `serve_extractions` what to extract."""
    global _leading
    _leading = True
    try:
        yield
    finally:
        _leading = False


def serve_extractions(model: ModelHandle):
    """On a rank other than 0 while rank 0 runs a protocol: extract this rank's share of every
    feature set rank 0 asks for, until it sends ("done", value); returns that value."""
    while True:
        kind, payload = dist.broadcast_object(None)
        if kind == "done":
            return payload
        source, transform, kwargs = payload
        extract_features(model, source, transform, **kwargs)


def _join_shards(shards: list[Path], out: Path, seconds: float) -> None:
    metas = [json.loads((d / "meta.json").read_text()) for d in shards]
    for name in ("cls", "patch_mean", "grids"):
        np.save(out / f"{name}.npy", np.concatenate([np.load(d / f"{name}.npy") for d in shards]))
    meta = dict(metas[0], n=sum(m["n"] for m in metas), total_patches=sum(m["total_patches"] for m in metas),
                seconds=seconds, shards=len(shards))
    meta["stages"] = {k: round(sum(m["stages"].get(k, 0.0) for m in metas), 4) for k in STAGE_KEYS}
    meta["stages"]["wall_s"] = round(seconds, 4)
    if meta["patches"]:
        offsets, base = [np.zeros(1, np.int64)], 0
        with open(out / "patches.bin", "wb") as f:
            for d, m in zip(shards, metas):
                offsets.append(np.load(d / "offsets.npy")[1:] + base)
                base += m["total_patches"]
                with open(d / "patches.bin", "rb") as part:
                    shutil.copyfileobj(part, f, 1 << 24)
        np.save(out / "offsets.npy", np.concatenate(offsets))
    (out / "meta.json").write_text(json.dumps(meta))


_BF16_FLAGS = ("avx512_bf16", "amx_bf16", "avx_ne_convert")
_bf16_warned = False


def cpu_has_native_bf16() -> bool | None:
    """Whether this CPU multiplies bf16 in hardware (AVX512-BF16, AMX, AVX-NE-CONVERT);
    None where /proc/cpuinfo cannot tell. Without it torch emulates bf16 matmuls, several
    times slower than fp32 (docs/BENCHMARKS.md)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return any(flag in line.split() for flag in _BF16_FLAGS)
    except OSError:
        pass
    return None


def _warn_if_bf16_emulated(model) -> None:
    global _bf16_warned
    if _bf16_warned or next(model.backbone.parameters()).device.type != "cpu":
        return
    if cpu_has_native_bf16() is False:
        _bf16_warned = True
        log.warning("precision bf16 on a CPU without bf16 instructions (%s): torch emulates bf16 "
                    "matmuls, which is slower than fp32 here; use precision fp32 for speed",
                    "/".join(_BF16_FLAGS))


@dataclass
class _Stages:
    """Where an extraction spent its time. Busy seconds per stage, summed over the threads
    doing it: thread CPU time in the "threads" engine (every kernel runs in the calling
    thread), wall time in the "plain" engine (its forward runs on an OpenMP team). wait_s:
    wall time the forward side sat idle waiting for decoded images; write_s: cache writes
    and bookkeeping in the calling thread. load_s and transform_s stay 0 when DataLoader
    worker processes decode (num_workers > 0)."""

    load_s: float = 0.0
    transform_s: float = 0.0
    forward_s: float = 0.0
    write_s: float = 0.0
    wait_s: float = 0.0
    wall_s: float = 0.0
    engine: str = ""
    threads: int = 1
    loader_threads: int = 0

    def as_dict(self) -> dict:
        busy = self.load_s + self.transform_s + self.forward_s + self.write_s
        d = {k: round(getattr(self, k), 4) for k in STAGE_KEYS}
        d.update(engine=self.engine, threads=self.threads, loader_threads=self.loader_threads,
                 outside_forward_share=round(1.0 - self.forward_s / busy, 4) if busy > 0 else 0.0)
        return d


class _Inline:
    """Executor stand-in that runs each task at once in the calling thread (plain engine)."""

    def submit(self, fn, *args) -> Future:
        f: Future = Future()
        try:
            f.set_result(fn(*args))
        except BaseException as e:  # noqa: BLE001 - re-raised by result()
            f.set_exception(e)
        return f

    def shutdown(self, wait: bool = True, cancel_futures: bool = False) -> None:
        pass


@contextmanager
def intra_op_threads(n: int):
    """torch's intra-op thread count set to n inside the block (process-wide), restored after."""
    old = torch.get_num_threads()
    if n != old:
        torch.set_num_threads(n)
    try:
        yield
    finally:
        if torch.get_num_threads() != old:
            torch.set_num_threads(old)


def _threaded_batches(source, transform, n: int, batch_size: int, pool: ThreadPoolExecutor,
                      stages: _Stages, prefetch: int = 1) -> Iterator[list[torch.Tensor]]:
    """Batches of transformed images in dataset order; the next `prefetch` batches are
    decoded while the current one is handed out."""

    def one(i: int):
        c0 = time.thread_time()
        img = source.load_image(i)
        c1 = time.thread_time()
        x = transform(img)
        return x, c1 - c0, time.thread_time() - c1

    def queue(start: int) -> list[Future]:
        return [pool.submit(one, i) for i in range(start, min(start + batch_size, n))]

    starts = iter(range(0, n, batch_size))
    queued = [queue(s) for _, s in zip(range(prefetch + 1), starts)]
    while queued:
        futs = queued.pop(0)
        nxt = next(starts, None)
        if nxt is not None:
            queued.append(queue(nxt))
        out = []
        for f in futs:
            x, dl, dt = f.result()
            stages.load_s += dl
            stages.transform_s += dt
            out.append(x)
        yield out


def _work_items(images: list[torch.Tensor], streams: int) -> list[list[int]]:
    """The batch split into forward chunks: each shape group into at most `streams` chunks of
    (nearly) equal size, so every forward thread gets a share of every group."""
    items = []
    for group in _shape_groups(images):
        size = math.ceil(len(group) / min(streams, len(group)))
        items.extend(group[s:s + size] for s in range(0, len(group), size))
    return items


def _forward_chunk(backbone, x: torch.Tensor, n_last_blocks, final_norm, precision, patches, patch_dtype,
                   timed: bool):
    """One chunk of one shape: (cls, patch_mean, (h, w), patch tokens (b, h*w, n, d) or None,
    busy seconds, perf_counter at the end). Runs in a forward thread: grad mode and autocast
    are thread-local, so they are set here."""
    t0 = time.thread_time() if timed else time.perf_counter()
    with torch.inference_mode():
        c, pm, p = _forward(backbone, x, n_last_blocks, final_norm, precision)
        b, n, h, w, d = p.shape
        flat = None
        if patches:
            flat = p.permute(0, 2, 3, 1, 4).reshape(b, h * w, n, d).cpu().numpy()
            if flat.dtype != np.dtype(patch_dtype):
                flat = flat.astype(patch_dtype)
        out = (c.cpu().numpy(), pm.cpu().numpy(), (h, w), flat)
    busy = (time.thread_time() if timed else time.perf_counter()) - t0
    return out + (busy, time.perf_counter())


def _extract_into(out: Path, model, source, transform, n_last_blocks, final_norm, patches, patch_dtype,
                  batch_size, num_workers, progress, desc, precision, engine="threads", threads=None):
    backbone = model.backbone.eval()
    device = devices.module_device(backbone)  # the raw-pixel baseline has no parameters
    n = len(source)
    d = backbone.embed_dim
    threaded = engine == "threads"
    n_threads = max(1, int(threads or torch.get_num_threads()))
    # one forward stream per thread on CPU; an accelerator takes one stream, fed by the loaders
    streams = n_threads if (threaded and device.type == "cpu") else 1
    stages = _Stages(engine=engine, threads=streams if threaded else torch.get_num_threads())
    t_start = time.perf_counter()
    sink = _FeatureSink(n, n_last_blocks, d, stages)
    sink.patch_file = open(out / "patches.bin", "wb") if patches else None
    # "threads": every kernel single-threaded; the parallelism is ours
    ctx = intra_op_threads(1) if threaded else nullcontext()
    fwd_pool = ThreadPoolExecutor(streams, thread_name_prefix="ssl-bench-fwd") if threaded else _Inline()
    load_pool = None
    try:
        with ctx, tqdm(total=n, desc=desc, unit="img", disable=not progress, leave=False) as bar:
            sink.bar = bar
            dataset = _Transformed(source, transform, list(range(n)))
            if threaded and num_workers == 0:
                stages.loader_threads = n_threads if getattr(source, "thread_safe", True) else 1
                load_pool = ThreadPoolExecutor(stages.loader_threads, thread_name_prefix="ssl-bench-load")
                batches: Iterator = _threaded_batches(source, transform, n, batch_size, load_pool, stages)
            else:
                batches = iter(DataLoader(dataset, batch_size=batch_size, shuffle=False, num_workers=num_workers,
                                          collate_fn=_collate_list, persistent_workers=False))

            def submit(images):
                return [(idx, fwd_pool.submit(_forward_chunk, backbone, _to_device(images, idx, device),
                                              n_last_blocks, final_norm, precision, patches, patch_dtype, threaded))
                        for idx in _work_items(images, streams)]

            _pipeline(batches, submit, sink.finish, stages)
    finally:
        for pool in (fwd_pool, load_pool):
            if pool is not None:
                pool.shutdown(wait=True, cancel_futures=True)
        if sink.patch_file is not None:
            sink.patch_file.close()
    if not threaded and num_workers == 0:
        stages.load_s, stages.transform_s = dataset.load_s, dataset.transform_s
    sink.save(out, patches)
    stages.wall_s = time.perf_counter() - t_start
    meta: dict[str, Any] = {"n": n, "n_last_blocks": n_last_blocks, "dim": d, "patches": patches,
                            "patch_dtype": patch_dtype, "total_patches": int(sink.offsets[-1]),
                            "stages": stages.as_dict()}
    (out / "meta.json").write_text(json.dumps(meta))


def _pipeline(batches: Iterator, submit, finish, stages: _Stages) -> None:
    """Batch k+1 is queued on the forward threads before batch k is collected and written.
    wait_s: time between the forward threads running out of work and the next batch of
    decoded images arriving."""
    pending = None
    i = 0
    while True:
        t_ask = time.perf_counter()
        images = next(batches, None)
        t_got = time.perf_counter()
        fwd_done = [f for _, f in pending[2]] if pending is not None else []
        if all(f.done() for f in fwd_done):
            t_idle = max([t_ask] + [f.result()[-1] for f in fwd_done])
            stages.wait_s += max(0.0, t_got - t_idle)
        if images is None:
            break
        work = submit(images)
        if pending is not None:
            finish(*pending)
        pending = (i, len(images), work)
        i += len(images)
    if pending is not None:
        finish(*pending)


class _FeatureSink:
    """The arrays one extraction fills and the patch file it streams to, batch by batch."""

    def __init__(self, n: int, n_last_blocks: int, d: int, stages: _Stages):
        self.cls = np.zeros((n, n_last_blocks, d), np.float32)
        self.pmean = np.zeros((n, n_last_blocks, d), np.float32)
        self.grids = np.zeros((n, 2), np.int64)
        self.offsets = np.zeros(n + 1, np.int64)
        self.stages = stages
        self.patch_file = None  # the patch tokens' stream, when they are kept
        self.bar = None  # the progress bar, once it is open

    def finish(self, start: int, count: int, work) -> None:
        """Collect one batch's forward chunks into rows [start, start + count)."""
        stages = self.stages
        per_image: dict[int, tuple] = {}
        for idx, fut in work:
            c, pm, (h, w), flat, busy, _ = fut.result()
            t = time.perf_counter()
            stages.forward_s += busy
            rows = [start + j for j in idx]
            self.cls[rows] = c
            self.pmean[rows] = pm
            self.grids[rows] = (h, w)
            if flat is not None:
                for k, j in enumerate(idx):
                    per_image[j] = flat[k]
            stages.write_s += time.perf_counter() - t
        t = time.perf_counter()
        if self.patch_file is not None:
            # written in dataset order: shape groups may reorder a batch
            for j in range(count):
                block = per_image[j]
                self.patch_file.write(memoryview(np.ascontiguousarray(block)).cast("B"))
                self.offsets[start + j + 1] = self.offsets[start + j] + block.shape[0]
        stages.write_s += time.perf_counter() - t
        self.bar.update(count)

    def save(self, out: Path, patches: bool) -> None:
        np.save(out / "cls.npy", self.cls)
        np.save(out / "patch_mean.npy", self.pmean)
        np.save(out / "grids.npy", self.grids)
        if patches:
            np.save(out / "offsets.npy", self.offsets)


def _to_device(images: list[torch.Tensor], idx: list[int], device: torch.device) -> torch.Tensor:
    x = torch.stack([images[j] for j in idx])
    if devices.pin_memory(device):  # page-locked, so the copy overlaps the GPU's work
        x = x.pin_memory()
    return x.to(device, non_blocking=True)


def _forward(backbone, x: torch.Tensor, n_last_blocks: int, final_norm: bool, precision: str):
    with devices.autocast(x.device, precision):
        f = backbone.get_features(x, n_last_blocks=n_last_blocks, final_norm=final_norm)
    p = f.patches.float()  # (B, n, h, w, d)
    return f.cls.float(), p.mean(dim=(2, 3)), p


def batch_features(backbone, x: torch.Tensor, *, n_last_blocks: int = 1, final_norm: bool = True,
                   precision: str = "fp32") -> tuple[torch.Tensor, torch.Tensor]:
    """(cls, patch_mean), each (B, n_last_blocks, d), for one batch of images: exactly what
    `extract_features` stores, for protocols that must forward fresh (augmented) images
    every step, such as the linear probe. The caller owns no_grad and eval mode."""
    c, pm, _ = _forward(backbone, x, n_last_blocks, final_norm, precision)
    return c, pm


def _shape_groups(images: list[torch.Tensor]) -> list[list[int]]:
    groups: dict[tuple, list[int]] = {}
    for j, im in enumerate(images):
        groups.setdefault(tuple(im.shape), []).append(j)
    return list(groups.values())
