"""The conformance suite every registered method must pass (built-in or plugin):
one training step, loss finite and decreasing over a few steps on a fixed batch,
an exact checkpoint round trip, and an exported backbone that every protocol accepts.

Run it for a method with ``check_method(config, data_root)``; tests/test_conformance.py
does so for every method in the registry, and `ssl-bench new-method` writes a test
that does so for a new one.
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Callable

import torch

from harness.config import apply_overrides, load_config
from harness.training.engine import build_method, global_batches, load_pretrain_config, param_groups
from harness.errors import SslBenchError
from harness.method import StepInfo

# Shrinks any CPU preset to seconds: one block, small batch.
TINY = ["backbone.depth=1", "backbone.drop_path_rate=0.0", "train.batch_size=8"]


class ConformanceError(SslBenchError):
    pass


def step_info(step: int) -> StepInfo:
    """A fixed StepInfo for driving a method outside the engine (conformance checks, step benchmarks)."""
    return StepInfo(step=step, epoch=1, steps_per_epoch=10, total_steps=100, lr=1e-3,
                    weight_decay=0.04, momentum=0.9)


def _fixed_batch(method, data_root: Path, batch_size: int):
    dataset = method.build_dataset(Path(data_root), seed=0)
    if hasattr(dataset, "set_epoch"):
        dataset.set_epoch(1)
    indices = global_batches(method, dataset, 1, batch_size, 0)[0]
    return method.collate([dataset[i] for i in indices])


def _loss(method, batch, step: int, seed: int | None = 0, info: Callable[[int], StepInfo] | None = None) -> dict:
    if seed is not None:
        torch.manual_seed(seed)  # drop-path, masking: the same draws for the same seed
    losses = method.training_step(batch, (info or step_info)(step))
    for k, v in losses.items():
        if not torch.isfinite(v).all():
            raise ConformanceError(f"loss {k!r} is not finite: {v}")
    return losses


def loss_falls_on_fixed_batch(method, batch, steps: int = 6, *, optimizer: torch.optim.Optimizer | None = None,
                              step_info_of: Callable[[int], StepInfo] | None = None,
                              seed_steps: bool = True) -> list[dict[str, float]]:
    """Trains ``method`` on one batch for ``steps`` steps and returns each step's losses (floats).
    Raises ConformanceError when a loss is not finite, ``loss`` is missing, it reaches no trainable
    parameter, or it is not lower at the last step than at the first.

    Defaults: AdamW (lr 1e-3, no weight decay) over the method's parameter groups; the conformance
    step numbers; torch seeded with the step number before each step (``seed_steps``), so drop-path
    and masking draw the same for the same step."""
    opt = optimizer or torch.optim.AdamW(param_groups(method, 0.0), lr=1e-3)
    info = step_info_of or step_info
    history = []
    for step in range(steps):
        losses = _loss(method, batch, step, seed=step if seed_steps else None, info=info)
        if "loss" not in losses:
            raise ConformanceError(f"training_step must return a 'loss' key, found {sorted(losses)}")
        opt.zero_grad(set_to_none=True)
        losses["loss"].backward()
        if not any(p.grad is not None for _, p in method.trainable_parameters()):
            raise ConformanceError("the loss reaches no trainable parameter")
        opt.step()
        method.on_step_end(info(step))
        history.append({k: float(v.detach()) for k, v in losses.items()})
    if not history[-1]["loss"] < history[0]["loss"]:
        raise ConformanceError(f"loss did not decrease on a fixed batch over {steps} steps: "
                               f"{[h['loss'] for h in history]}")
    return history


def check_method(config: str | Path, data_root: Path, overrides: list[str] | None = None,
                 steps: int = 6, protocols: bool = True) -> dict:
    raw = apply_overrides(load_config(config), TINY + list(overrides or []), origin="conformance override")
    source = raw.pop("_source_", str(config))
    raw["data"] = {"root": str(data_root)}
    cfg = load_pretrain_config(raw, source)
    torch.manual_seed(0)
    method = build_method(cfg, source)
    method.train()
    batch = _fixed_batch(method, data_root, cfg.train.batch_size)
    report: dict = {"method": cfg.method.get("name")}

    # 1. losses: a dict with "loss"; finite; decreasing on a fixed batch
    report["losses"] = [h["loss"] for h in loss_falls_on_fixed_batch(method, batch, steps)]

    # 2. exact checkpoint round trip (state dict -> fresh instance -> same loss)
    state = {k: v.clone() for k, v in method.state_dict().items()}
    torch.manual_seed(1)
    twin = build_method(cfg, source)
    twin.load_state_dict(state)
    twin.train()
    a = float(_loss(method, batch, steps, seed=123)["loss"])
    b = float(_loss(twin, batch, steps, seed=123)["loss"])
    if not math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-7):
        raise ConformanceError(f"state-dict round trip changed the loss: {a} vs {b}")

    # 3. the teacher is not trained by gradients; export has timm names and loads strictly
    if any(p.requires_grad for p in method.teacher.parameters()):
        raise ConformanceError("teacher parameters must not require gradients")
    exported = method.export_backbone()
    report["exported_keys"] = len(exported)
    if protocols:
        report["protocols"] = check_export(method, exported, data_root)
    return report


def check_export(method, exported: dict, data_root: Path) -> dict:
    """Every registered protocol (plugins too) accepts the exported backbone, each through the
    check it declares (``Protocol.conformance_check``), on the tiny SynthScenes; a protocol
    that declares none is reported as skipped."""
    import tempfile

    from harness.models.checkpoints import save_checkpoint
    from harness.models.handle import ModelHandle
    from harness.registry import PROTOCOLS

    arch_kwargs = method.teacher.backbone.arch_kwargs
    out: dict = {}
    with tempfile.TemporaryDirectory() as tmp:
        path = save_checkpoint(Path(tmp) / "export", exported, {
            "method": method.registry_name, "arch": method.teacher.backbone.arch, "arch_kwargs": arch_kwargs})
        model = ModelHandle.from_checkpoint(path)
        for name in PROTOCOLS.names():
            metrics = PROTOCOLS.get(name).conformance_check(model, exported, Path(data_root))
            out[name] = metrics if metrics is not None else {"skipped": "declares no conformance check"}
    return out
