"""UperNet fine-tuning on ADE20K (iBOT Table 6, SynCLR Table 7), through mmseg 1.2.2.

Any front-door model becomes a multi-level backbone (harness.models.multilevel: four blocks,
iBOT's deconvolution / identity / max-pool adapter), under mmseg's ``UPerHead`` and auxiliary
``FCNHead``, trained end to end with AdamW and layer-wise lr decay (harness.training.layer_decay,
as iBOT's segmentation constructor), a linear warm-up and poly schedule, and tested with a
sliding window; mIoU through mmseg's IoUMetric. Settings and their sources: config.py; the run:
runner.py; what is registered into mmseg: mmseg_parts.py; differences: README.md.

    ssl-bench eval --protocol upernet --preset ibot_vit_b16 --dataset ade20k --data-root DIR --checkpoint CKPT
"""
from __future__ import annotations

import os
from pathlib import Path

import torch

from benchmarks.upernet.config import EXECUTION_ONLY, UperNetConfig
from harness.errors import ConfigError, NotApplicable
from harness.models.handle import ModelHandle
from harness.models.multilevel import check_multilevel, official_rescales
from harness.presets import load_presets
from harness.protocol import Protocol, ProtocolResult
from harness.registry import register_protocol

HEAD_SPEC = {"head": "UPerHead + FCNHead (aux)", "mmseg": "1.2.2", "backbone": "multi-level feature contract",
             "adapter_bn": "SyncBN (BatchNorm on one process)"}


@register_protocol("upernet")
class UperNet(Protocol):
    Config = UperNetConfig
    NOT_IN_FINGERPRINT = EXECUTION_ONLY
    PRESETS = load_presets("upernet", Path(__file__).parent / "presets")
    DEFAULT_PRESET = "ibot_vit_b16"
    RUNS_ON_EVERY_RANK = True  # mmengine's launcher 'pytorch' trains on every torchrun process

    def fingerprint(self, extra: dict | None = None) -> str:
        return super().fingerprint({"head_spec": HEAD_SPEC, **(extra or {})})

    def precision(self) -> str:
        return "fp16" if self.cfg.amp else "fp32"

    def rescales(self, backbone) -> list[float]:
        c = self.cfg
        return list(c.rescales) if c.rescales is not None else list(official_rescales(backbone.patch_size))

    def check(self, model: ModelHandle) -> list[float]:
        """Refuse, in one line, what cannot run; else the rescales of the adapter."""
        if model.context == "pixels":
            raise NotApplicable("upernet fine-tunes a network's blocks; the raw-pixel baseline has none")
        check_multilevel(model.backbone, self.cfg.out_indices)
        patch = int(getattr(model.backbone, "patch_size", 0) or 0)
        if self.cfg.crop_size % patch:
            raise ConfigError(f"upernet: crop_size {self.cfg.crop_size} is not a multiple of the model's "
                              f"stride {patch}")
        if self.cfg.amp and not torch.cuda.is_available():
            raise ConfigError("upernet: amp (fp16, the official recipe) needs a GPU; set amp: false to train "
                              "in fp32 on the CPU")
        if model.device.type == "cpu" and torch.cuda.is_available():
            raise ConfigError("upernet runs through mmengine, which trains on the GPU when torch sees one: run "
                              "it with --device cuda, or hide the GPUs (CUDA_VISIBLE_DEVICES='')")
        return self.rescales(model.backbone)

    def default_work_dir(self, model: ModelHandle, data_root: Path) -> Path:
        from harness.data.io import data_stamp
        from harness.paths import home

        fingerprint = self.identity(data_root, model).fingerprint
        return home() / "mmseg" / model.cache_key[:16] / f"upernet-{fingerprint}-{data_stamp(data_root)[:8]}"

    def run(self, model: ModelHandle, data_root: Path) -> list[ProtocolResult]:
        from benchmarks.upernet import mmseg_parts, runner
        from harness.openmmlab.stack import require_mmseg

        rescales = self.check(model)
        require_mmseg()
        import mmseg.datasets  # noqa: F401  (registers datasets, transforms)
        import mmseg.evaluation  # noqa: F401

        mmseg_parts.register()
        data = runner.resolve_ade(self.cfg.dataset, data_root)
        work_dir = Path(self.cfg.work_dir) if self.cfg.work_dir else self.default_work_dir(model, data_root)
        run = runner.train(self.cfg, data, model.backbone, model.cache_key, rescales, work_dir)
        if int(os.environ.get("RANK", os.environ.get("SLURM_PROCID", "0"))) != 0:
            return []  # one set of records per run, written by rank 0
        return [self.result(run, data, rescales)]

    def result(self, run: dict, data, rescales: list[float]) -> ProtocolResult:
        from harness.openmmlab.per_image_io import read_per_image_file

        c = self.cfg
        return ProtocolResult(
            metrics=dict(run["metrics"]), dataset=c.dataset, split="validation", seed=c.seed,
            variant={}, per_image=read_per_image_file(run["per_image"]),
            params={"iters": c.iters, "reported_iter": run["reported_iter"], "validations": run["validations"],
                    "num_classes": data.num_classes, "synthetic": data.classes is not None,
                    "rescales": rescales, "lr": c.lr, "reported": "last validation"},
            artifacts={"work_dir": run["work_dir"]})
