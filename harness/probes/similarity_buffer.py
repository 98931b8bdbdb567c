"""One output tensor reused by every block of a blocked similarity search."""
from __future__ import annotations

import torch


class SimilarityBuffer:
    """Writes each (queries x bank block) product into one preallocated float32 tensor.

    On the CPU a fresh block of a few hundred MiB costs its page faults, about as long as the
    matmul itself; a buffer reused across blocks pays them once. A product returned by `mm` is a
    view of the buffer, valid until the next call.
    """

    def __init__(self, max_rows: int, max_cols: int, device: torch.device | str = "cpu"):
        self.max_rows, self.max_cols = int(max_rows), int(max_cols)
        self._flat = torch.empty(self.max_rows * self.max_cols, device=device)

    def mm(self, queries: torch.Tensor, block: torch.Tensor) -> torch.Tensor:
        """queries @ block.T, shape (len(queries), len(block)), in the buffer."""
        rows, cols = queries.shape[0], block.shape[0]
        if rows > self.max_rows or cols > self.max_cols:
            raise ValueError(f"a {rows} x {cols} similarity block does not fit the "
                             f"{self.max_rows} x {self.max_cols} buffer")
        return torch.mm(queries, block.T, out=self._flat[:rows * cols].view(rows, cols))
