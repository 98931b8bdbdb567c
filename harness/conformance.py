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

import torch

from harness.config import apply_overrides, load_config
from harness.engine import build_method, global_batches, load_pretrain_config, param_groups
from harness.errors import SslBenchError
from methods.base import StepInfo

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


def _loss(method, batch, step: int, seed: int = 0) -> dict:
    torch.manual_seed(seed)  # drop-path, masking: the same draws for the same seed
    losses = method.training_step(batch, step_info(step))
    for k, v in losses.items():
        if not torch.isfinite(v).all():
            raise ConformanceError(f"loss {k!r} is not finite: {v}")
    return losses


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
    opt = torch.optim.AdamW(param_groups(method, 0.0), lr=1e-3)
    history = []
    for step in range(steps):
        losses = _loss(method, batch, step, seed=step)
        if "loss" not in losses:
            raise ConformanceError(f"training_step must return a 'loss' key, found {sorted(losses)}")
        opt.zero_grad(set_to_none=True)
        losses["loss"].backward()
        if not any(p.grad is not None for _, p in method.trainable_parameters()):
            raise ConformanceError("the loss reaches no trainable parameter")
        opt.step()
        method.on_step_end(step_info(step))
        history.append(float(losses["loss"].detach()))
    report["losses"] = history
    if not history[-1] < history[0]:
        raise ConformanceError(f"loss did not decrease on a fixed batch over {steps} steps: {history}")

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
    """Every protocol accepts the exported backbone (run on the tiny SynthScenes)."""
    import tempfile

    from harness.checkpoints import save_checkpoint
    from harness.evaluate import build_protocol
    from harness.models import ModelHandle

    arch_kwargs = method.teacher.backbone.arch_kwargs
    out: dict = {}
    with tempfile.TemporaryDirectory() as tmp:
        path = save_checkpoint(Path(tmp) / "export", exported, {
            "method": method.registry_name, "arch": method.teacher.backbone.arch, "arch_kwargs": arch_kwargs})
        model = ModelHandle.from_checkpoint(path)
        cache = {"cache": False, "progress": False}
        runs = [("knn", "synth", {"dataset": "imagefolder", "ks": [5], **cache}, data_root / "imagenet"),
                ("linear", "synth", {"dataset": "imagefolder", "cached_features": True, "epochs": 1,
                                     "progress": False}, data_root / "imagenet"),
                ("dense_nn", "cribo", {"dataset": "voc", "fractions": ["1/1"], "seeds": [42],
                                       "progress": False}, data_root)]
        for name, preset, values, root in runs:
            res = build_protocol(name, preset, values).run(model, root)
            out[name] = res[0].metrics
        # the mmseg protocols take the backbone through the bridge's strict key map
        from benchmarks.mmseg_bridge import convert_state_dict

        converted = convert_state_dict(exported)
        out["mmseg_bridge"] = {"keys": len(converted)}
    return out
