"""The fine-tuned backbone as a harness checkpoint, so that every protocol reads it through
``--checkpoint`` (iBOT's robustness figures evaluate fine-tuned models so).

``finetuned.safetensors`` + ``finetuned.json`` (harness.models.checkpoints) in the run's folder:
the backbone's weights (the EMA's with ``model_ema``, the official ``checkpoint-best`` keeps both;
the model's here: the numbers the record reports are the model's), its architecture, and the
provenance: the starting model's record block, the fine-tuning settings and their fingerprint,
the data set, the steps and epochs done, and what trained it. With mean pooling the fine-tuned
network has no final norm of its own (``fc_norm`` normalises the pooled feature): the
checkpoint keeps the starting model's final norm so that it loads as the same architecture, and
says so; the head (``head.*``, ``fc_norm.*``) is written beside it as ``finetuned_head.safetensors``.
"""
from __future__ import annotations

from pathlib import Path

from harness.config import to_dict
from harness.models.backbone import ViTBackbone
from harness.models.checkpoints import save_checkpoint
from harness.models.handle import ModelHandle


def save_finetuned(run, model: ModelHandle, cfg, folder: Path, settings_fingerprint: str) -> str | None:
    """The checkpoint's .safetensors path, or None for a backbone the harness ViT cannot load
    (an adapted timm / transformers / user model: its weights stay in the resume file)."""
    from safetensors.torch import save_file

    from harness.io_utils import atomic_write

    backbone = run.classifier.backbone
    if not isinstance(backbone, ViTBackbone):
        return None
    meta = {"method": model.meta.get("method", "random_init"), "arch": backbone.arch,
            "arch_kwargs": backbone.arch_kwargs, "pretrain_data": model.meta.get("pretrain_data"),
            "epochs": model.meta.get("epochs"), "steps": model.meta.get("steps"),
            "finetune": {"from": model.record_info(), "dataset": cfg.dataset, "train_split": cfg.train_split,
                         "settings": to_dict(cfg), "fingerprint": settings_fingerprint,
                         "steps": run.progress.step, "epochs": run.progress.step / max(run.steps_per_epoch, 1),
                         "trained_on": run.trained_on(),
                         "final_norm": ("the starting model's (mean pooling trains fc_norm instead)"
                                        if run.classifier.use_mean_pooling else "fine-tuned")}}
    if backbone.pos_interp != "official":
        meta["pos_interp"] = backbone.pos_interp
    folder.mkdir(parents=True, exist_ok=True)
    path = save_checkpoint(folder / "finetuned", run.classifier.backbone_state(), meta)
    head = run.classifier.head_state()
    atomic_write(folder / "finetuned_head.safetensors", lambda p: save_file(head, str(p)))
    return str(path)
