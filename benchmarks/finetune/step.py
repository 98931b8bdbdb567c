"""One micro-step of fine-tuning, in the order of iBOT's (BEiT's) ``engine_for_finetuning.train_one_epoch``
(bytedance/ibot at da316d8), for the training loop and for parity checks against the official step.

Per micro-batch: the step's lr (times each group's ``lr_scale``) and weight decay (groups whose
decay is > 0) are set; mixup / cutmix draws the mixed batch; the forward runs under autocast; the
loss is checked finite, divided by ``update_freq`` and back-propagated through the gradient scaler;
on the last micro-batch of an optimisation step the gradients are unscaled, their total norm taken
(clipped to ``clip_grad`` when set, ``clip_grad_norm_``), the optimizer steps, the scaler updates,
the gradients are zeroed and the EMA follows the model.
"""
from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass

import torch
from torch import nn

from harness.runtime import device as devices


@dataclass
class MicroStep:
    """What one micro-step gives back: the loss before the division by ``update_freq``, the total
    gradient norm (on the micro-step that updates; None otherwise) and whether it updated."""

    loss: float
    grad_norm: float | None
    updated: bool


def set_schedule(optimizer: torch.optim.Optimizer, lr: float, weight_decay: float) -> None:
    """The official per-step assignment: every group's lr is ``lr x lr_scale``; the weight decay
    of groups that decay (``weight_decay > 0``) becomes the schedule's value."""
    for group in optimizer.param_groups:
        group["lr"] = lr * group.get("lr_scale", 1.0)
        if group["weight_decay"] > 0:
            group["weight_decay"] = weight_decay


def total_grad_norm(parameters) -> torch.Tensor:
    """The official ``get_grad_norm_``: the 2-norm of the per-tensor gradient 2-norms."""
    grads = [p.grad.detach() for p in parameters if p.grad is not None]
    if not grads:
        return torch.tensor(0.0)
    return torch.norm(torch.stack([torch.norm(g, 2.0) for g in grads]), 2.0)


def micro_step(model: nn.Module, criterion: nn.Module, optimizer: torch.optim.Optimizer,
               images: torch.Tensor, targets: torch.Tensor, *, lr: float, weight_decay: float,
               mixup=None, scaler: torch.amp.GradScaler | None = None, precision: str = "fp32",
               update_freq: int = 1, update: bool = True, clip_grad: float | None = None,
               ema=None, no_sync: bool = False) -> MicroStep:
    """One micro-batch of ``train_one_epoch``. ``update``: whether this micro-batch is the last of
    its optimisation step (``(data_iter_step + 1) % update_freq == 0``). ``no_sync``: skip the
    DDP gradient all-reduce of a micro-batch that does not update (the sum is the same)."""
    set_schedule(optimizer, lr, weight_decay)
    if mixup is not None:
        images, targets = mixup(images, targets)
    sync = model.no_sync() if no_sync and not update and hasattr(model, "no_sync") else contextlib.nullcontext()
    with sync:
        with devices.autocast(images.device, precision):
            loss = criterion(model(images), targets)
        loss_value = loss.item()
        if not math.isfinite(loss_value):
            raise FloatingPointError(f"finetune: the loss is {loss_value}; stopping (lower the learning "
                                     f"rate, or use fp32 / bf16 instead of fp16)")
        scaler = scaler or torch.amp.GradScaler(images.device.type, enabled=False)
        scaler.scale(loss / update_freq).backward()
    if not update:
        return MicroStep(loss_value, None, False)
    scaler.unscale_(optimizer)
    params = [p for group in optimizer.param_groups for p in group["params"]]
    if clip_grad is not None:
        norm = torch.nn.utils.clip_grad_norm_(params, clip_grad)
    else:
        norm = total_grad_norm(params)
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad()
    if ema is not None:
        ema.update(model.module if hasattr(model, "module") else model)
    return MicroStep(loss_value, float(norm), True)
