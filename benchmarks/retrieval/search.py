"""The search: cosine similarity as a matrix product against the database bank, streamed over
chunks of queries (and, on the CPU, over blocks of the bank) so that memory stays at
``query_chunk`` x database scores whatever the database size, and either the top-k per query
(copy detection) or where given database images land in each query's ranking (image retrieval:
the average precision reads nothing else, so the full ranking is never sorted).

Ties in score are broken by database index (a stable descending sort); the official scripts'
``torch.argsort`` / ``topk`` leave their order unspecified.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator, Sequence

import numpy as np
import torch

BANK_DTYPES = {"float32": torch.float32, "float16": torch.float16}


@dataclass
class Bank:
    """L2-normalised database features kept in ``dtype`` on ``device``."""

    features: torch.Tensor  # (N, D)
    block: int = 65536  # bank rows scored at once on the CPU (fp16 is upcast block by block)

    @classmethod
    def build(cls, features, dtype: str = "float32", device: str | torch.device = "cpu") -> "Bank":
        x = torch.as_tensor(np.asarray(features, dtype=np.float32))
        return cls(x.to(device=device, dtype=BANK_DTYPES[dtype]))

    def __len__(self) -> int:
        return self.features.shape[0]

    def scores(self, queries: torch.Tensor) -> torch.Tensor:
        """(q, N) float32 similarities of ``queries`` (q, D) float32 with every bank row."""
        bank = self.features
        q = queries.to(bank.device)
        if bank.device.type != "cpu":  # fp16 GEMM accumulates in fp32 on the GPU
            return (q.to(bank.dtype) @ bank.T).float()
        if bank.dtype == torch.float32:
            return q @ bank.T
        out = torch.empty(q.shape[0], len(self), dtype=torch.float32)
        for s in range(0, len(self), self.block):
            out[:, s:s + self.block] = q @ bank[s:s + self.block].float().T
        return out


def query_chunks(queries, chunk: int) -> Iterator[tuple[int, torch.Tensor]]:
    q = torch.as_tensor(np.asarray(queries, dtype=np.float32))
    for s in range(0, q.shape[0], chunk):
        yield s, q[s:s + chunk]


def ranks_of(row: torch.Tensor, items: torch.Tensor) -> torch.Tensor:
    """Zero-based positions of database indices ``items`` in the descending order of ``row``
    (ties by index): the images scoring higher, plus the equal ones of smaller index.

    One pass over the row, without sorting it: each score is placed among the sorted scores
    of the items (``bucketize``, log(items) comparisons); an item's count of higher scores is
    the count placed above its own, and only an item whose score other images share is
    compared with the whole row for the index tie-break."""
    v = row[items]
    bounds = torch.sort(v).values
    m = len(bounds)

    def at_least(placed: torch.Tensor) -> torch.Tensor:  # [j] = #{x: placed(x) >= j}
        return torch.bincount(placed, minlength=m + 1).flip(0).cumsum(0).flip(0)

    below = at_least(torch.bucketize(row, bounds, right=False))  # placed = #{bounds < x}
    at_or_below = at_least(torch.bucketize(row, bounds, right=True))  # placed = #{bounds <= x}
    own = torch.searchsorted(bounds, v, right=True)  # #{bounds <= v}: x > v iff #{bounds < x} >= own
    higher = below[own]
    equal = at_or_below[own] - higher  # images scoring exactly v, the item included
    for i in torch.nonzero(equal > 1).flatten().tolist():
        higher[i] += int(((row == v[i]) & (torch.arange(len(row), device=row.device) < items[i])).sum())
    return higher


def labelled_ranks(bank: Bank, queries, labelled: Sequence[np.ndarray], chunk: int = 16) -> list[dict[int, int]]:
    """Per query, {database index: zero-based rank} for the indices in ``labelled[q]``."""
    out: list[dict[int, int]] = []
    for start, q in query_chunks(queries, chunk):
        s = bank.scores(q)
        for i in range(s.shape[0]):
            items = np.unique(np.asarray(labelled[start + i], dtype=np.int64))
            r = ranks_of(s[i], torch.as_tensor(items, device=s.device)).cpu().numpy()
            out.append(dict(zip(items.tolist(), r.tolist())))
    return out


def top_k(bank: Bank, queries, k: int, chunk: int = 256) -> tuple[np.ndarray, np.ndarray]:
    """(scores, indices), each (Q, k), best first, ties by index."""
    k = min(k, len(bank))
    sims, ids = [], []
    for _, q in query_chunks(queries, chunk):
        s = bank.scores(q)
        # a stable descending sort would cost N log N; topk then an index tie-break on its k
        v, i = torch.topk(s, k, dim=1, largest=True, sorted=True)
        order = np.lexsort((i.cpu().numpy(), -v.cpu().numpy()), axis=-1)
        sims.append(np.take_along_axis(v.cpu().numpy(), order, 1))
        ids.append(np.take_along_axis(i.cpu().numpy(), order, 1))
    return np.concatenate(sims), np.concatenate(ids)
