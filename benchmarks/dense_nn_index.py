"""Nearest-neighbour backends of the dense NN protocol (faiss on CPU), behind one small
interface: ``add`` L2-normalised bank rows in chunks, ``search`` queries in chunks,
``reconstruct`` bank rows.

- ``exact`` / float32: ``IndexFlatIP`` (what open-hummingbird-eval's faiss path builds,
  there on GPU: `hbird/nn/search_faiss.py`, `GpuIndexFlatIP`);
- ``exact`` / float16: ``IndexScalarQuantizer(QT_fp16, inner product)``: the same exhaustive
  search over vectors stored in half precision (half the memory; scores differ from
  float32 by the fp16 rounding of the bank);
- ``ivfpq``: ``IndexIVFPQ`` (inner product) trained on a seeded sample of the bank; approximate,
  for banks that do not fit; its mIoU deviation from exact search is measured by
  ``benchmarks/perf/dense_nn_bench.py``.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

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


def _faiss():
    import faiss

    return faiss


class BankIndex:
    def __init__(self, dim: int, spec: IndexSpec, threads: int | None = None):
        faiss = _faiss()
        if threads:
            faiss.omp_set_num_threads(int(threads))
        self.dim, self.spec = dim, spec
        if spec.kind == "exact":
            if spec.dtype == "float32":
                self.index = faiss.IndexFlatIP(dim)
            elif spec.dtype == "float16":
                self.index = faiss.IndexScalarQuantizer(dim, faiss.ScalarQuantizer.QT_fp16,
                                                        faiss.METRIC_INNER_PRODUCT)
            else:
                raise ConfigError(f"bank_dtype must be 'float32' or 'float16', found {spec.dtype!r}")
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
        return int(self.index.ntotal)

    @property
    def needs_training(self) -> bool:
        return not self.index.is_trained

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
        self.index.add(np.ascontiguousarray(rows, dtype=np.float32))

    def search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """(similarities (n, k) float32, indices (n, k) int64), best first."""
        if self.ntotal < k:
            raise ConfigError(f"the memory bank holds {self.ntotal} patches, fewer than k={k}; "
                              f"lower k or use a larger fraction")
        q = np.ascontiguousarray(queries, dtype=np.float32)
        sims, idx = self.index.search(q, k)
        return sims, idx

    def reconstruct(self, ids: np.ndarray) -> np.ndarray:
        """Stored bank rows (float32) for ``ids`` (any shape) -> ids.shape + (dim,)."""
        flat = np.ascontiguousarray(ids.reshape(-1), dtype=np.int64)
        if self.spec.kind == "exact" and self.spec.dtype == "float32":
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
        return int(self.index.ntotal) * self.dim * per
