"""The fine-tuned backbone as a harness checkpoint, so that every protocol reads it through
``--checkpoint`` (iBOT's robustness figures evaluate fine-tuned models so).

``finetuned.safetensors`` + ``finetuned.json`` (harness.models.checkpoints) in the run's folder:
the backbone's weights (the EMA's with ``model_ema``, the official ``checkpoint-best`` keeps both;
the model's here: the numbers the record reports are the model's), its architecture, and the
provenance: the starting model's record block, the fine-tuning settings and their fingerprint,
the data set, the steps and epochs done, and what trained it. With mean pooling the fine-tuned
network has no final norm of its own (``fc_norm`` normalises the pooled feature): the
checkpoint keeps the starting model's final norm so that it loads as the same architecture, and
says so; the head (``head.*``, ``fc_norm.*``, ``head_mlp.*``) is written beside it as
``finetuned_head.safetensors``.

An adapted model (timm, transformers, user code) is no harness ViT: its fine-tuned weights are
written for its own front-door spec (harness.models.sources.reload: ``timm:NAME,weights=FILE``, a
``save_pretrained`` folder for ``hf:``), and ``finetuned.json`` holds the provenance, the spec that
loads them and their sha256.
"""
from __future__ import annotations

from pathlib import Path

from harness.config import to_dict
from harness.models.backbone import ViTBackbone
from harness.models.checkpoints import save_checkpoint
from harness.models.handle import ModelHandle


def save_finetuned(run, model: ModelHandle, cfg, folder: Path, settings_fingerprint: str) -> dict[str, str]:
    """Write the fine-tuned weights; returns their file (``checkpoint``), its ``sha256`` and the
    model ``spec`` that loads them (``checkpoint:PATH`` for a harness ViT)."""
    from safetensors.torch import save_file

    from harness.io_utils import atomic_write, sha256_file

    backbone = run.classifier.backbone
    provenance = _provenance(run, model, cfg, settings_fingerprint)
    head = run.classifier.head_state()
    if not isinstance(backbone, ViTBackbone):
        return _save_adapted(run, model, folder, provenance, head)
    meta = {"method": model.meta.get("method", "random_init"), "arch": backbone.arch,
            "arch_kwargs": backbone.arch_kwargs, "pretrain_data": model.meta.get("pretrain_data"),
            "epochs": model.meta.get("epochs"), "steps": model.meta.get("steps"), "finetune": provenance}
    if backbone.pos_interp != "official":
        meta["pos_interp"] = backbone.pos_interp
    folder.mkdir(parents=True, exist_ok=True)
    path = save_checkpoint(folder / "finetuned", run.classifier.backbone_state(), meta)
    atomic_write(folder / "finetuned_head.safetensors", lambda p: save_file(head, str(p)))
    return {"checkpoint": str(path), "sha256": sha256_file(path), "spec": f"checkpoint:{path}"}


def _provenance(run, model: ModelHandle, cfg, settings_fingerprint: str) -> dict:
    return {"from": model.record_info(), "dataset": cfg.dataset, "train_split": cfg.train_split,
            "settings": to_dict(cfg), "fingerprint": settings_fingerprint,
            "steps": run.progress.step, "epochs": run.progress.step / max(run.steps_per_epoch, 1),
            "trained_on": run.trained_on(),
            "final_norm": ("the starting model's (mean pooling trains fc_norm instead)"
                           if run.classifier.use_mean_pooling else "fine-tuned")}


def _save_adapted(run, model: ModelHandle, folder: Path, provenance: dict, head: dict) -> dict[str, str]:
    import json

    from safetensors.torch import save_file

    from harness.io_utils import atomic_write, sha256_file
    from harness.models.sources.reload import save_reloadable

    spec, weights = save_reloadable(model, run.classifier.backbone_state(), folder, "finetuned_weights")
    out = {"checkpoint": str(weights), "sha256": sha256_file(weights), "spec": spec}
    atomic_write(folder / "finetuned_head.safetensors", lambda p: save_file(head, str(p)))
    meta = {**out, "method": model.meta.get("method"), "adapter": model.backbone.adapter_info(),
            "finetune": provenance}
    atomic_write(folder / "finetuned.json", lambda p: p.write_text(json.dumps(meta, indent=1, default=str)))
    return out
