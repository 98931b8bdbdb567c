"""Nearest-neighbour backends of the dense NN protocol (faiss on CPU), behind one small
interface: ``add`` L2-normalised bank rows in chunks, ``search`` queries in chunks,
``reconstruct`` bank rows.

- ``exact`` / float32: ``IndexFlatIP`` (what open-hummingbird-eval's faiss path builds,
  there on GPU: `hbird/nn/search_faiss.py`, `GpuIndexFlatIP`);
- ``exact`` / float16, or any exact search on a CUDA device: the bank is a torch tensor (half
  precision: half the memory) searched by blocked matmul + top-k (bank blocks upcast to
  float32 on the fly); the same exhaustive search, at BLAS speed (faiss's fp16 scalar
  quantizer scans without BLAS and is two orders of magnitude slower on CPU), and on a GPU
  when one is there (faiss-cpu has no GPU path);
- ``ivfpq``: ``IndexIVFPQ`` (inner product) trained on a seeded sample of the bank; approximate,
  for banks that do not fit; its mIoU deviation from exact search is measured by
  ``experiments/dense_nn_bench.py``.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from harness.probes.similarity_buffer import SimilarityBuffer
from harness.runtime.device import resolve_device
from harness.errors import ConfigError


@dataclass(frozen=True)
class IndexSpec:
    kind: str = "exact"          # "exact" | "ivfpq"
    dtype: str = "float32"       # "float32" | "float16" (exact only; PQ codes are their own)
    nlist: int = 1024
    pq_m: int = 16
    pq_nbits: int = 8
    nprobe: int = 32
    train_size: int = 131072
    seed: int = 0
    device: str = "auto"         # exact search: auto | cpu | cuda | cuda:N (harness.runtime.device)
    block: int = 262144          # torch backend: bank rows per matmul block


def _faiss():
    import faiss

    return faiss


class BankIndex:
    def __init__(self, dim: int, spec: IndexSpec, threads: int | None = None):
        faiss = _faiss()
        if threads:
            faiss.omp_set_num_threads(int(threads))
        self.dim, self.spec = dim, spec
        self.torch_bank: TorchExact | None = None
        if spec.kind == "exact":
            if spec.dtype not in ("float32", "float16"):
                raise ConfigError(f"bank_dtype must be 'float32' or 'float16', found {spec.dtype!r}")
            device = resolve_device(spec.device)
            if spec.dtype == "float32" and device.type == "cpu":
                self.index = faiss.IndexFlatIP(dim)
            else:
                self.index = None
                self.torch_bank = TorchExact(dim, spec.dtype, device, spec.block)
        elif spec.kind == "ivfpq":
            if dim % spec.pq_m:
                raise ConfigError(f"ivfpq: pq_m ({spec.pq_m}) must divide the feature dimension ({dim})")
            self._quantizer = faiss.IndexFlatIP(dim)
            self.index = faiss.IndexIVFPQ(self._quantizer, dim, spec.nlist, spec.pq_m, spec.pq_nbits,
                                          faiss.METRIC_INNER_PRODUCT)
        else:
            raise ConfigError(f"index must be 'exact' or 'ivfpq', found {spec.kind!r}")

    @property
    def ntotal(self) -> int:
        if self.torch_bank is not None:
            return self.torch_bank.ntotal
        return int(self.index.ntotal)

    @property
    def needs_training(self) -> bool:
        return self.torch_bank is None and not self.index.is_trained

    def train(self, sample: np.ndarray) -> None:
        """ivfpq: train the coarse quantizer and the product quantizer on a bank sample."""
        faiss = _faiss()
        sample = np.ascontiguousarray(sample, dtype=np.float32)
        need = 2 ** self.spec.pq_nbits
        if len(sample) < need:
            raise ConfigError(f"ivfpq needs at least {need} bank patches to train its product "
                              f"quantizer (pq_nbits={self.spec.pq_nbits}), found {len(sample)}; use "
                              f"index 'exact' for a bank this small")
        nlist = min(self.spec.nlist, max(1, len(sample) // 39))  # faiss wants >= 39 points per list
        if nlist != self.index.nlist:
            self._quantizer = faiss.IndexFlatIP(self.dim)
            self.index = faiss.IndexIVFPQ(self._quantizer, self.dim, nlist, self.spec.pq_m,
                                          self.spec.pq_nbits, faiss.METRIC_INNER_PRODUCT)
        self.index.train(sample)
        self.index.nprobe = min(self.spec.nprobe, nlist)

    def add(self, rows: np.ndarray) -> None:
        if self.needs_training:
            raise RuntimeError("ivfpq index used before train()")
        if self.torch_bank is not None:
            self.torch_bank.add(rows)
            return
        self.index.add(np.ascontiguousarray(rows, dtype=np.float32))

    def search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """(similarities (n, k) float32, indices (n, k) int64), best first."""
        if self.ntotal < k:
            raise ConfigError(f"dense_nn: the memory bank holds {self.ntotal} patches (the patch grids of the "
                              f"training images kept at this fraction), fewer than k={k} neighbours; set k to at "
                              f"most {self.ntotal} (--set k=N; in a suite --set dense_nn.k=N), use a larger fraction, "
                              f"or a model of a smaller stride (more patches an image)")
        q = np.ascontiguousarray(queries, dtype=np.float32)
        if self.torch_bank is not None:
            return self.torch_bank.search(q, k)
        sims, idx = self.index.search(q, k)
        return sims, idx

    def reconstruct(self, ids: np.ndarray) -> np.ndarray:
        """Stored bank rows (float32) for ``ids`` (any shape) -> ids.shape + (dim,)."""
        flat = np.ascontiguousarray(ids.reshape(-1), dtype=np.int64)
        if self.torch_bank is not None:
            out = self.torch_bank.reconstruct(flat)
        elif self.spec.kind == "exact" and self.spec.dtype == "float32":
            faiss = _faiss()
            xb = faiss.rev_swig_ptr(self.index.get_xb(), self.index.ntotal * self.dim)
            out = np.asarray(xb).reshape(self.index.ntotal, self.dim)[flat]
        else:
            if self.spec.kind == "ivfpq":
                self.index.make_direct_map()
            out = self.index.reconstruct_batch(flat)
        return out.reshape(*ids.shape, self.dim)

    def nbytes(self) -> int:
        per = {"float32": 4, "float16": 2}.get(self.spec.dtype, 4)
        if self.spec.kind == "ivfpq":
            return int(self.index.ntotal) * (self.spec.pq_m * self.spec.pq_nbits // 8 + 8)
        return self.ntotal * self.dim * per


# the (queries x bank block) similarity buffer: about 256 MiB on CPU, 4 GiB on a GPU
SIM_ELEMS_CPU = 2**26
SIM_ELEMS_CUDA = 2**30


class TorchExact:
    """Exhaustive inner-product search over a torch bank, in blocks (exact top-k)."""

    def __init__(self, dim: int, dtype: str, device, block: int):
        import torch

        self.dim, self.device, self.block = dim, device, int(block)
        self.dtype = torch.float16 if dtype == "float16" else torch.float32
        self._chunks: list = []
        self._bank = None

    @property
    def ntotal(self) -> int:
        if self._bank is not None:
            return int(self._bank.shape[0])
        return int(sum(c.shape[0] for c in self._chunks))

    def add(self, rows: np.ndarray) -> None:
        import torch

        rows = torch.from_numpy(np.ascontiguousarray(rows, dtype=np.float32))
        self._chunks.append(rows.to(self.dtype).to(self.device))
        self._bank = None

    def bank(self):
        import torch

        if self._bank is None:
            self._bank = torch.cat(self._chunks) if len(self._chunks) != 1 else self._chunks[0]
            self._chunks = [self._bank]
        return self._bank

    def search(self, q: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        import torch

        bank = self.bank()
        block = min(self.block, bank.shape[0])
        max_elems = SIM_ELEMS_CUDA if self.device.type == "cuda" else SIM_ELEMS_CPU
        q_step = max(1, max_elems // block)
        buffer = SimilarityBuffer(min(q_step, len(q)), block, self.device)
        # a float16 bank is upcast once per search, not once per query chunk, where its whole
        # float32 copy fits the similarity buffer's budget (the same values either way); a larger
        # bank is upcast block by block, so that a float16 bank never costs its float32 size
        upcast = {} if bank.shape[0] * self.dim <= max_elems else None
        out_s, out_i = [], []
        for qs in range(0, len(q), q_step):
            qt = torch.from_numpy(q[qs:qs + q_step]).to(self.device)
            best_s = best_i = None
            for start in range(0, bank.shape[0], block):
                blk = upcast.get(start) if upcast is not None else None
                if blk is None:
                    blk = bank[start:start + block].float()
                    if upcast is not None:
                        upcast[start] = blk
                sim = buffer.mm(qt, blk)
                s, i = topk_rows(sim, min(k, blk.shape[0]))
                i = i + start
                if best_s is not None:
                    s, j = torch.topk(torch.cat([best_s, s], 1), k, dim=1)
                    i = torch.gather(torch.cat([best_i, i], 1), 1, j)
                best_s, best_i = s, i
            out_s.append(best_s.cpu())
            out_i.append(best_i.cpu())
        return torch.cat(out_s).numpy(), torch.cat(out_i).numpy().astype(np.int64)

    def reconstruct(self, ids: np.ndarray) -> np.ndarray:
        import torch

        return self.bank()[torch.from_numpy(ids).to(self.device)].float().cpu().numpy()


# columns per group of `topk_rows`'s first pass: 2,000 group maxima for a bank of 128,000 rows
TOPK_GROUP = 64


def topk_rows(sim, k: int):
    """``torch.topk(sim, k, dim=1)`` (largest first), the same values and indices, several times
    faster on the CPU for long rows. torch's CPU top-k copies every (value, index) pair of a row
    into a heap; here the k+1 largest of the rows' group maxima bound the answer from below, so
    only the groups whose maximum reaches that bound are searched (about k groups of
    ``TOPK_GROUP``). A row whose k+1 largest values hold a tie, where torch's heap decides which
    index comes first, is searched again by ``torch.topk`` itself, as is every row off the CPU."""
    import torch

    r, n = sim.shape
    m = n // TOPK_GROUP
    if sim.device.type != "cpu" or m <= k + 1:
        return torch.topk(sim, k, dim=1)
    cut = m * TOPK_GROUP
    heads = sim[:, :cut].reshape(r, m, TOPK_GROUP).amax(-1)
    every = torch.cat([heads, sim[:, cut:].amax(-1, keepdim=True)], 1) if n > cut else heads
    if not bool(torch.isfinite(every).all()):  # torch ranks NaN first: its own rules decide
        return torch.topk(sim, k, dim=1)
    top = torch.topk(every, k + 1, dim=1)
    floor = top.values[:, -1:]
    width = int((heads >= floor).sum(1).max())
    if width * TOPK_GROUP * 2 > n:  # many equal maxima (constant features): no shortcut
        return torch.topk(sim, k, dim=1)
    # the k+1 largest of a row lie in groups whose maximum is at least `floor`: the `width`
    # groups of largest maxima (the k+1 found where no two maxima tie), in column order, and the tail
    groups = top.indices if width == k + 1 and n == cut else torch.topk(heads, width, dim=1).indices
    groups = groups.sort(dim=1).values
    cols = (groups.unsqueeze(-1) * TOPK_GROUP + torch.arange(TOPK_GROUP)).reshape(r, -1)
    if n > cut:
        cols = torch.cat([cols, torch.arange(cut, n).expand(r, -1)], 1)
    vals, j = torch.topk(torch.gather(sim, 1, cols), k + 1, dim=1)
    idx = torch.gather(cols, 1, j[:, :k])
    tied = (vals[:, 1:] == vals[:, :-1]).any(1).nonzero().flatten()
    vals = vals[:, :k]
    if len(tied):
        vals[tied], idx[tied] = torch.topk(sim[tied], k, dim=1)
    return vals, idx
