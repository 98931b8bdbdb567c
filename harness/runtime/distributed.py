"""Every collective goes through here; each is a no-op in a single process.

Launch with ``torchrun --nproc_per_node=N`` (one node) or with ``--nnodes``/``--rdzv-endpoint``
(several), or through SLURM (harness/running/launch.py): ``init_from_env`` reads the rendezvous from the
environment and picks NCCL when the work runs on GPUs, gloo on the CPU. Pretraining averages
gradients through torch's DistributedDataParallel (harness/training/engine.py); the helpers here serve
the methods' own collectives (centres, all-gathered keys, memory banks) and sharded
feature extraction.
"""
from __future__ import annotations

import os
from datetime import timedelta

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


def init_from_env(device: torch.device | None = None) -> bool:
    """Initialise the process group when launched by torchrun (or SLURM through
    harness/running/launch.py); returns True if distributed. NCCL when `device` is a GPU, else gloo."""
    if is_dist():
        return True
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1:
        return False
    cuda = device is not None and device.type == "cuda"
    if cuda:
        torch.cuda.set_device(device)
    dist.init_process_group(backend="nccl" if cuda else "gloo", device_id=device if cuda else None)
    return True


def export_job_environment():
    """Inside one task of a multi-task submitit job (harness/running/launch.py): export the
    torch.distributed variables (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT) from
    submitit's JobEnvironment, so that ``init_from_env`` then sees what torchrun would have set
    (what ``init_distributed_mode`` of the official DINO / iBOT code reads from SLURM). Every
    data-parallel job calls this first; returns submitit's environment."""
    import submitit

    # GPUs stay all visible (not one per task, submitit's default): this module and
    # harness.runtime.device pick the task's GPU by LOCAL_RANK, as under torchrun. Overwrite, since
    # variables inherited from a shell that was itself a distributed job describe that job.
    env = submitit.helpers.TorchDistributedEnvironment().export(set_cuda_visible_devices=False, overwrite=True)
    print(f"rank {env.rank} of {env.world_size} (local rank {env.local_rank}), "
          f"master {env.master_addr}:{env.master_port}", flush=True)
    return env


def barrier() -> None:
    if is_dist():
        dist.barrier()


# Waits on file work and on rank 0's protocol run: rank 0 alone joins the feature shards (tens
# of GB for a dense-NN bank) and runs the protocol while the others wait; NCCL's default
# 10-minute timeout would end the job. torchrun (and srun) end every process when one fails,
# so a long timeout does not leave orphans waiting.
FILE_WAIT_TIMEOUT = timedelta(hours=48)
_control: tuple[object, object] | None = None  # (the default group it belongs to, the gloo group)


def control_group():
    """A gloo group over every rank with the long FILE_WAIT_TIMEOUT, for barriers around file
    work and for small Python objects (gloo needs no GPU tensors). Every rank must reach the
    first call (it creates the group collectively)."""
    global _control
    world = dist.group.WORLD
    if _control is None or _control[0] is not world:
        _control = (world, dist.new_group(backend="gloo", timeout=FILE_WAIT_TIMEOUT))
    return _control[1]


def file_barrier() -> None:
    """Wait for every rank around work on shared files (see FILE_WAIT_TIMEOUT)."""
    if is_dist():
        dist.barrier(group=control_group())


def broadcast_object(obj=None, src: int = 0):
    """Rank `src`'s picklable `obj` on every rank (over the control group)."""
    if not is_dist():
        return obj
    box = [obj]
    dist.broadcast_object_list(box, src=src, group=control_group())
    return box[0]


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


def broadcast_module(module: torch.nn.Module) -> None:
    """Make every rank start from rank 0's parameters and buffers."""
    if not is_dist():
        return
    for t in list(module.parameters()) + list(module.buffers()):
        dist.broadcast(t.data, src=0)
