"""What ``seg_linear`` and ``segmenter`` share as protocols: the result records and the
protocol base; their settings are ``SegConfig`` (benchmarks/segmentation/config.py, with the
source of every default). Both run through mmseg: mmseg_config.py builds the mmengine config
from these settings and sweep.py runs it.

Two backbone paths, one sweep: a ViT whose weights mmseg's ``VisionTransformer`` computes
exactly (the harness ViT of every method and zoo checkpoint, a plain timm ViT) is rebuilt as
that ViT (vit_weights.py, mmseg_vit.py); any other model keeps its own module, wrapped as an mmseg backbone
that returns its patch grid (mmseg_adapted.py). The second path's head spec (how the features
reach the head, the mask transformer's head count) is the model's (``model_settings``): records keep
it in their model block (``protocol_settings``), and the fingerprint is the protocol's, one for
every model.
"""
from __future__ import annotations

import math
import os
from pathlib import Path

import torch

from benchmarks.segmentation.config import EXECUTION_ONLY, SegConfig
from benchmarks.segmentation import mmseg_adapted
from benchmarks.segmentation.mmseg_config import MASK_DROP_PATH, MASK_LAYERS
from benchmarks.segmentation.sweep import run_seg_protocol
from benchmarks.segmentation.vit_weights import vit_mismatch
from harness.config import fingerprint
from harness.errors import ConfigError, NotApplicable
from harness.models.feature_backbone import is_adapted
from harness.openmmlab.per_image_io import read_per_image_file
from harness.openmmlab.stack import MMSEG_VERSION


# ============================================================================ which backbone path
def mmseg_vit_weights(backbone) -> tuple[dict, dict] | None:
    """(state dict, arch kwargs with num_heads) of a backbone that mmseg's VisionTransformer
    computes exactly: the harness ViT, or an adapted timm ViT that computes what the harness ViT
    computes (``native_equivalent``), whose weights convert strictly; None for any other model."""
    from harness.models.backbone import ViTBackbone  # timm: imported only when a model is at hand

    if is_adapted(backbone):
        if not backbone.native_equivalent():
            return None
        module = backbone.model
        state = module.state_dict()
        arch = {"num_heads": module.blocks[0].attn.num_heads}
    elif isinstance(backbone, ViTBackbone):
        state = backbone.backbone_state_dict()
        arch = dict(getattr(backbone, "arch_kwargs", {}) or {})
        arch.setdefault("num_heads", backbone.blocks[0].attn.num_heads)
    else:
        return None
    if vit_mismatch(state) is not None:
        return None
    return state, arch


# ============================================================================ protocol glue
def best_of(runs: list[dict], key: str = "mIoU") -> dict:
    finite = [r for r in runs if not math.isnan(r["metrics"].get(key, float("nan")))]
    if not finite:
        raise RuntimeError(f"no run of the sweep produced a finite {key}")
    return max(finite, key=lambda r: r["metrics"][key])


def to_results(runs: list[dict], cfg: SegConfig, split: str = "val") -> list:
    """One ProtocolResult per lr (variant lr=<lr>) + the best over the sweep (variant lr=best).

    Every record names the lr its number comes from (params ``lr``) and carries all the
    validations of that lr's training (params ``validations``: [iteration, mIoU] pairs);
    the number is the last validation's (``reported_iter`` = iters), CrIBo's final one.
    """
    from harness.protocol import ProtocolResult

    def params(r: dict) -> dict:
        return {"lr": r["lr"], "eta_min": r["lr"] * cfg.eta_min_ratio, "iters": r["iters"],
                "num_classes": r["num_classes"], "train_lists": r["train_lists"],
                "synthetic": r["synthetic"], "validations": r["validations"],
                "reported_iter": r["reported_iter"], "reported": "last validation"}

    def artifacts(r: dict) -> dict:
        return {"per_class_csv": r["csv"], "validation_log": r["validation_log"], "work_dir": r["work_dir"],
                **({"mmengine_log": r["mmengine_log"]} if r.get("mmengine_log") else {})}

    # each number's validation images (the best's are its lr's), for a bootstrap over them
    per_image = {id(r): read_per_image_file(r.get("per_image")) for r in runs}
    out = []
    for r in runs:
        out.append(ProtocolResult(
            metrics=dict(r["metrics"]), dataset=cfg.dataset, split=split, seed=cfg.seed,
            variant={"lr": r["lr"]}, params=params(r), artifacts=artifacts(r), per_image=per_image[id(r)]))
    best = best_of(runs)
    out.append(ProtocolResult(
        metrics=dict(best["metrics"]), dataset=cfg.dataset, split=split, seed=cfg.seed,
        variant={"lr": "best"}, per_image=per_image[id(best)],
        params={**params(best), "best_lr": best["lr"], "lrs": list(cfg.lrs), "lr_sweep": cfg.lr_sweep,
                "mIoU_by_lr": {f"{r['lr']:g}": r["metrics"].get("mIoU") for r in runs},
                # its files are the record of variant lr=<best_lr>'s: each artifact has one record
                "artifacts_in_variant": {"lr": best["lr"]}},
        artifacts={}))
    return out


class SegProtocolBase:
    """Mixin for the two mmseg protocols (``Protocol`` subclasses set HEAD and FROZEN)."""

    HEAD: str = "linear"
    FROZEN: bool = True
    NOT_IN_FINGERPRINT = EXECUTION_ONLY
    RUNS_ON_EVERY_RANK = True  # mmengine's launcher 'pytorch' trains on every torchrun process

    @classmethod
    def conformance_check(cls, model, exported: dict, data_root: Path) -> dict:
        """mmseg trains too long for the conformance suite: the exported backbone must pass
        the bridge's strict key map into mmseg's VisionTransformer."""
        from benchmarks.segmentation.vit_weights import convert_state_dict

        return {"mmseg_keys": len(convert_state_dict(exported))}

    def head_spec(self) -> dict:
        """What the fingerprint records about the head and the backbone's training mode."""
        spec = {"head": self.HEAD, "frozen_backbone": self.FROZEN, "mmseg": MMSEG_VERSION}
        if self.HEAD == "mask":
            spec.update(mask_layers=MASK_LAYERS, mask_drop_path=MASK_DROP_PATH)
        return spec

    def fingerprint(self, extra: dict | None = None) -> str:
        return super().fingerprint({"head_spec": self.head_spec(), **(extra or {})})

    def model_settings(self, model) -> dict:
        """Nothing for a model on the ViT path; for any other, the head spec with how its
        features reach the head (mmseg_adapted.head_spec: the mask transformer's head count)."""
        if model.context == "pixels" or not hasattr(model.backbone, "embed_dim"):
            return {}  # refused by run, or not this protocol's model (the chance row)
        if mmseg_vit_weights(model.backbone) is not None:
            return {}
        return {"head_spec": {**self.head_spec(),
                              **mmseg_adapted.head_spec(model.backbone, self.HEAD, self.FROZEN)}}

    def default_work_dir(self, model, data_root: Path) -> Path:
        from harness.data.io import data_stamp
        from harness.paths import home

        # the data stamp too: mmengine resumes from this folder, never from another data set's run;
        # the model's cache key holds its adapter's settings, the model settings its backbone path
        identity = self.identity(data_root, model)
        built = f"-{fingerprint(identity.model_settings, length=8)}" if identity.model_settings else ""
        return (home() / "mmseg" / model.cache_key[:16]
                / f"{self.registry_name}-{identity.fingerprint}{built}-{data_stamp(data_root)[:8]}")

    def precision(self) -> str:
        return "fp16" if self.cfg.amp else "fp32"  # mmengine's AmpOptimWrapper autocasts to fp16

    def run(self, model, data_root: Path) -> list:
        if model.context == "pixels":  # mmseg trains on a network's features; pixels have none
            raise NotApplicable(f"{self.registry_name} trains a segmentation head on a network's features "
                                "through mmseg; the raw-pixel baseline has no network")
        if model.device.type == "cpu" and torch.cuda.is_available():
            # mmengine's Runner puts the model on the GPU whenever one is visible
            raise ConfigError(f"{self.registry_name} runs through mmengine, which trains on the GPU when "
                              "torch sees one: run it with --device cuda, or hide the GPUs "
                              "(CUDA_VISIBLE_DEVICES='') to run it on the CPU")
        work_dir = Path(self.cfg.work_dir) if self.cfg.work_dir else self.default_work_dir(model, data_root)
        vit = mmseg_vit_weights(model.backbone)
        if vit is not None:
            state, arch = vit
            state = {k: v.detach().cpu() for k, v in state.items()}  # mmengine loads them from a file
            runs = run_seg_protocol(state, arch, self.cfg, data_root, work_dir, head=self.HEAD,
                                    frozen=self.FROZEN)
        else:
            runs = mmseg_adapted.run_feature_seg_protocol(
                model.backbone, model.cache_key, self.cfg, data_root, work_dir, head=self.HEAD,
                frozen=self.FROZEN, protocol=self.registry_name)
        if int(os.environ.get("RANK", os.environ.get("SLURM_PROCID", "0"))) != 0:
            return []  # one set of records per run, written by rank 0
        return to_results(runs, self.cfg)
