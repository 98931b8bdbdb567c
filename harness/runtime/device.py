"""Where work runs and in which precision: the one place that decides.

Every entry point (pretraining, evaluation, feature extraction, suites, paper tables) takes a
device spec ``auto | cpu | cuda | cuda:N`` and resolves it here. ``auto`` is CUDA when torch
sees a GPU, else the CPU; under torchrun or SLURM each process takes the GPU of its ``LOCAL_RANK``
(modulo the GPUs it sees).
Asking for CUDA where there is none is an error, never a silent fall-back to the CPU.

Precision: ``fp32 | fp16 | bf16``. fp32 is strict: TF32 tensor-core maths is switched off on
CUDA (for every precision: the flags are process-wide), so a GPU's fp32 number differs from the
CPU's only by summation order. fp16 and bf16
autocast the forward passes (as the official DINO / iBOT / CrIBo ``--use_fp16`` does, with
a gradient scaler for fp16 training). On a CPU, fp16 and bf16 are also tried once per process
on a small attention block (`cpu_kernel_failure`): a CPU whose torch kernels cannot run them is
one clear error before any work, never a crash inside a model.
"""
from __future__ import annotations

import contextlib
import functools
import os
import platform
from typing import Any

import torch

from harness.errors import SslBenchError
from harness.runtime import DEVICE_HELP

PRECISIONS = ("fp32", "fp16", "bf16")
_DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}


class DeviceError(SslBenchError):
    """A device or precision that this machine cannot provide."""


def local_rank() -> int:
    return int(os.environ.get("LOCAL_RANK", "0"))


def _cuda_unavailable_reason() -> str:
    if torch.version.cuda is None:
        return "this torch build has no CUDA support (a CPU-only wheel)"
    return (f"torch {torch.__version__} (CUDA {torch.version.cuda}) sees no GPU "
            "(no driver, or CUDA_VISIBLE_DEVICES hides them)")


def device_type(spec: str | torch.device | None = "auto") -> str:
    """"cpu" or "cuda": the kind of device a spec names, for cache keys and skip checks.

    Read from the spec alone (``cuda`` and ``cuda:N`` are CUDA), so a SLURM login node without
    a GPU computes the keys of the GPU jobs it submits; only ``auto`` asks this machine."""
    if isinstance(spec, torch.device):
        return spec.type
    text = (spec or "auto").strip().lower()
    if text == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if text == "cpu":
        return "cpu"
    if text == "cuda" or (text.startswith("cuda:") and text[5:].isdigit()):
        return "cuda"
    raise DeviceError(f"device must be {DEVICE_HELP}; found {spec!r}")


def resolve_device(spec: str | torch.device | None = "auto") -> torch.device:
    """The torch.device for a spec; a clear error when it cannot be had here."""
    if isinstance(spec, torch.device):
        spec = str(spec)
    text = (spec or "auto").strip().lower()
    if text == "auto":
        return resolve_device("cuda") if torch.cuda.is_available() else torch.device("cpu")
    if text == "cpu":
        return torch.device("cpu")
    if text == "cuda" or text.startswith("cuda:"):
        if not torch.cuda.is_available():
            raise DeviceError(f"device {text!r} was asked for, but {_cuda_unavailable_reason()}; "
                              "use --device cpu (or auto)")
        count = torch.cuda.device_count()
        world = int(os.environ.get("WORLD_SIZE", "1"))
        if text == "cuda":
            # one GPU per process under torchrun / SLURM. Modulo: with one GPU visible per task
            # (--gpus-per-task, --gpu-bind) a task's LOCAL_RANK may exceed its GPU count.
            index = local_rank() % count if "LOCAL_RANK" in os.environ else torch.cuda.current_device()
        else:
            if world > 1:
                raise DeviceError(f"device {text!r} was asked for in a distributed run of {world} processes: "
                                  "every process would use that one GPU; use --device cuda (each process "
                                  "takes the GPU of its LOCAL_RANK), and CUDA_VISIBLE_DEVICES to choose GPUs")
            try:
                index = int(text.split(":", 1)[1])
            except ValueError:
                raise DeviceError(f"device {text!r} is not of the form cuda:N") from None
        if not 0 <= index < count:
            raise DeviceError(f"device cuda:{index} was asked for, but torch sees {count} GPU(s) "
                              f"(cuda:0 .. cuda:{count - 1})")
        return torch.device("cuda", index)
    raise DeviceError(f"device must be {DEVICE_HELP}; found {spec!r}")


@functools.cache
def cpu_kernel_failure(precision: str, backward: bool = False) -> str | None:
    """Why this CPU cannot run `precision`'s kernels in this process, or None when it can.

    Tried once per process on what a ViT block does under autocast: a linear layer and
    scaled_dot_product_attention (and their backward for training). The shape is one the
    CPU flash-attention kernel packs its bf16/fp16 operands for where the CPU has AMX (64+
    tokens and queries): under ``ATEN_CPU_CAPABILITY=default`` torch picks that packing from
    the hardware but runs the kernels built without AVX-512, and the packing raises
    ("pack_vnni2 is only supported when avx512 is supported"). Asking torch's could-pack
    rule instead would tie this to one torch version's internals; running the kernels asks
    the one thing that matters."""
    if precision == "fp32":
        return None
    g = torch.Generator().manual_seed(0)
    tokens, heads, head_dim = 128, 4, 64
    x = torch.randn(tokens, heads * head_dim, generator=g)
    w = torch.randn(3 * heads * head_dim, heads * head_dim, generator=g) * head_dim ** -0.5
    try:  # whatever grad mode the caller is in (an extraction runs under inference_mode)
        with torch.inference_mode(False), torch.set_grad_enabled(backward):
            x = x.clone().requires_grad_(backward)
            with torch.autocast(device_type="cpu", dtype=_DTYPES[precision]):
                qkv = torch.nn.functional.linear(x, w).reshape(1, tokens, 3, heads, head_dim)
                q, k, v = qkv.permute(2, 0, 3, 1, 4)
                out = torch.nn.functional.scaled_dot_product_attention(q, k, v)
            if backward:
                out.float().sum().backward()
    except RuntimeError as exc:
        return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return None


def _cpu_kernels_note() -> str:
    forced = os.environ.get("ATEN_CPU_CAPABILITY")
    note = f"torch {torch.__version__}, CPU kernels {torch.backends.cpu.get_cpu_capability()}"
    return note + (f" (ATEN_CPU_CAPABILITY={forced})" if forced else "")


def check_precision(precision: str, device: torch.device, backward: bool = False) -> str:
    """`precision` if `device` can run it (its backward too when `backward`); else DeviceError."""
    if precision not in PRECISIONS:
        raise DeviceError(f"precision must be one of {', '.join(PRECISIONS)}; found {precision!r}")
    if device.type == "cpu" and precision != "fp32":
        failure = cpu_kernel_failure(precision, backward)
        if failure:
            unset = " or unset ATEN_CPU_CAPABILITY" if os.environ.get("ATEN_CPU_CAPABILITY") else ""
            raise DeviceError(f"precision {precision} was asked for on the CPU, but this CPU cannot run torch's "
                              f"{precision} attention kernels here ({_cpu_kernels_note()}): {failure}; "
                              f"use precision fp32{unset}")
    if precision == "bf16" and device.type == "cuda":
        # native bf16 maths from compute capability 8.0 (Ampere); torch.cuda.is_bf16_supported()
        # also counts emulation (V100, T4) and asks the current GPU, not the requested one
        major, minor = torch.cuda.get_device_capability(device)
        if (major, minor) < (8, 0):
            raise DeviceError(f"precision bf16 was asked for, but {gpu_name(device)} (compute capability "
                              f"{major}.{minor}) has no native bf16 (8.0 and later: Ampere, Hopper); "
                              "use fp16 or fp32")
    return precision


def prepare(device: torch.device, precision: str = "fp32", backward: bool = False) -> torch.device:
    """Make `device` current for this process and check that it can run `precision` (its
    backward too when `backward`: training).

    TF32 is switched off on CUDA whatever the precision: fp32 means fp32 (cuDNN allows TF32 by
    default), and the flags are process-wide, so an fp16 run that switched them on would leave
    the fp32 evaluations after it in TF32. Autocast regions compute in fp16/bf16 regardless."""
    check_precision(precision, device, backward)
    if device.type == "cuda":
        torch.cuda.set_device(device)
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    return device


def tf32_enabled() -> bool:
    """Whether CUDA fp32 matmuls or convolutions may use TF32 in this process (something other
    than `prepare`, e.g. a library, may have switched it on)."""
    return bool(torch.backends.cuda.matmul.allow_tf32 or torch.backends.cudnn.allow_tf32)


def autocast(device: torch.device, precision: str):
    """Autocast for fp16/bf16; a no-op context for fp32."""
    if precision == "fp32":
        return contextlib.nullcontext()
    return torch.autocast(device_type=device.type, dtype=_DTYPES[precision])


def grad_scaler(device: torch.device, precision: str) -> torch.amp.GradScaler:
    """Loss scaling for fp16 training (the official code's fp16_scaler); disabled otherwise."""
    return torch.amp.GradScaler(device.type, enabled=precision == "fp16")


def to_device(obj: Any, device: torch.device, non_blocking: bool = True) -> Any:
    """Move every tensor inside nested lists, tuples and dicts to `device`."""
    if isinstance(obj, torch.Tensor):
        return obj.to(device, non_blocking=non_blocking)
    if isinstance(obj, dict):
        return {k: to_device(v, device, non_blocking) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        moved = [to_device(v, device, non_blocking) for v in obj]
        if hasattr(obj, "_fields"):  # namedtuple
            return type(obj)(*moved)
        return type(obj)(moved)
    return obj


def gpu_name(device: torch.device) -> str | None:
    return torch.cuda.get_device_name(device) if device.type == "cuda" else None


def pin_memory(device: torch.device) -> bool:
    """Page-locked host batches only help (and only work) when copying to a GPU."""
    return device.type == "cuda"


def synchronize(device: torch.device) -> None:
    """Wait for queued GPU work, so wall-clock timings measure it."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def module_device(module: torch.nn.Module) -> torch.device:
    p = next(module.parameters(), None)
    return p.device if p is not None else torch.device("cpu")


def device_record(device: torch.device, precision: str, world_size: int = 1) -> dict[str, Any]:
    """What did the work, as records and checkpoints state it."""
    rec: dict[str, Any] = {"device": str(device), "device_type": device.type, "precision": precision,
                           "world_size": int(world_size), "gpu": gpu_name(device)}
    if device.type == "cuda":
        rec["cuda"] = torch.version.cuda
        rec["tf32"] = tf32_enabled()
    else:
        rec["cpu"] = platform.processor() or platform.machine()
        rec["threads"] = torch.get_num_threads()
    return rec
