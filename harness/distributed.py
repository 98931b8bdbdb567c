"""Every collective goes through here; each is a no-op in a single process.

Launch with ``torchrun --nproc_per_node=N``: ``init_from_env`` picks gloo on CPU and
NCCL on GPUs. Gradients are averaged explicitly (``average_gradients``) rather than
through DistributedDataParallel's bucketed hooks: the arithmetic is the same, it works
for students made of several modules, and the order of reductions is deterministic.
"""
from __future__ import annotations

import os

import torch
import torch.distributed as dist


def is_dist() -> bool:
    return dist.is_available() and dist.is_initialized()


def world_size() -> int:
    return dist.get_world_size() if is_dist() else 1


def rank() -> int:
    return dist.get_rank() if is_dist() else 0


def is_main() -> bool:
    return rank() == 0


def init_from_env() -> bool:
    """Initialise the process group when launched by torchrun; returns True if distributed."""
    if is_dist():
        return True
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1:
        return False
    backend = "nccl" if torch.cuda.is_available() else "gloo"
    dist.init_process_group(backend=backend)
    if backend == "nccl":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
    return True


def barrier() -> None:
    if is_dist():
        dist.barrier()


def all_reduce_sum(t: torch.Tensor) -> torch.Tensor:
    """In-place sum over ranks; returns ``t``."""
    if is_dist():
        dist.all_reduce(t, op=dist.ReduceOp.SUM)
    return t


def all_reduce_mean(t: torch.Tensor) -> torch.Tensor:
    if is_dist():
        dist.all_reduce(t, op=dist.ReduceOp.SUM)
        t /= world_size()
    return t


@torch.no_grad()
def all_gather_cat(t: torch.Tensor) -> torch.Tensor:
    """Concatenate equally sized tensors from all ranks along dim 0 (no gradient)."""
    if not is_dist():
        return t
    parts = [torch.empty_like(t) for _ in range(world_size())]
    dist.all_gather(parts, t.contiguous())
    return torch.cat(parts, dim=0)


def all_gather_cat_with_grad(t: torch.Tensor) -> torch.Tensor:
    """Concatenate over ranks keeping the gradient path of the local part."""
    if not is_dist():
        return t
    parts = [torch.empty_like(t) for _ in range(world_size())]
    dist.all_gather(parts, t.contiguous())
    parts[rank()] = t
    return torch.cat(parts, dim=0)


@torch.no_grad()
def all_gather_variable(t: torch.Tensor) -> torch.Tensor:
    """Concatenate tensors whose first dimension differs between ranks."""
    if not is_dist():
        return t
    n = torch.tensor([t.shape[0]], device=t.device)
    sizes = [torch.zeros_like(n) for _ in range(world_size())]
    dist.all_gather(sizes, n)
    sizes = [int(s.item()) for s in sizes]
    padded = torch.zeros((max(sizes),) + tuple(t.shape[1:]), dtype=t.dtype, device=t.device)
    padded[: t.shape[0]] = t
    parts = [torch.empty_like(padded) for _ in sizes]
    dist.all_gather(parts, padded)
    return torch.cat([p[:s] for p, s in zip(parts, sizes)], dim=0)


def average_gradients(params) -> None:
    """Average .grad over ranks (what DistributedDataParallel does), in a fixed order."""
    if not is_dist():
        return
    ws = world_size()
    for p in params:
        if p.grad is not None:
            dist.all_reduce(p.grad, op=dist.ReduceOp.SUM)
            p.grad /= ws


def broadcast_module(module: torch.nn.Module) -> None:
    """Make every rank start from rank 0's parameters and buffers."""
    if not is_dist():
        return
    for t in list(module.parameters()) + list(module.buffers()):
        dist.broadcast(t.data, src=0)
