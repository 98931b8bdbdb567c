"""What ``seg_linear`` and ``segmenter`` share as protocols: the result records and the
protocol base; their settings are ``SegConfig`` (benchmarks/segmentation/config.py, with the
source of every default). Both run through mmseg: benchmarks/segmentation/mmseg_bridge.py
builds the mmengine config from these settings and runs it.
"""
from __future__ import annotations

import math
import os
from pathlib import Path

import torch

from benchmarks.segmentation.config import EXECUTION_ONLY, SegConfig
from benchmarks.segmentation.mmseg_bridge import MASK_DROP_PATH, MASK_LAYERS, MMSEG_VERSION, run_seg_protocol
from harness.errors import ConfigError, NotApplicable


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
        return {"per_class_csv": r["csv"], "validation_log": r["validation_log"], "work_dir": r["work_dir"]}

    out = []
    for r in runs:
        out.append(ProtocolResult(
            metrics=dict(r["metrics"]), dataset=cfg.dataset, split=split, seed=cfg.seed,
            variant={"lr": r["lr"]}, params=params(r), artifacts=artifacts(r)))
    best = best_of(runs)
    out.append(ProtocolResult(
        metrics=dict(best["metrics"]), dataset=cfg.dataset, split=split, seed=cfg.seed,
        variant={"lr": "best"},
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
    HEADLINE_METRIC = "mIoU"
    NOT_IN_FINGERPRINT = EXECUTION_ONLY
    RUNS_ON_EVERY_RANK = True  # mmengine's launcher 'pytorch' trains on every torchrun process

    @classmethod
    def conformance_check(cls, model, exported: dict, data_root: Path) -> dict:
        """mmseg trains too long for the conformance suite: the exported backbone must pass
        the bridge's strict key map into mmseg's VisionTransformer."""
        from benchmarks.segmentation.mmseg_bridge import convert_state_dict

        return {"mmseg_keys": len(convert_state_dict(exported))}

    def head_spec(self) -> dict:
        """What the fingerprint records about the head and the backbone's training mode."""
        spec = {"head": self.HEAD, "frozen_backbone": self.FROZEN, "mmseg": MMSEG_VERSION}
        if self.HEAD == "mask":
            spec.update(mask_layers=MASK_LAYERS, mask_drop_path=MASK_DROP_PATH)
        return spec

    def fingerprint(self, extra: dict | None = None) -> str:
        return super().fingerprint({"head_spec": self.head_spec(), **(extra or {})})

    def default_work_dir(self, model, data_root: Path) -> Path:
        from harness.data.io import data_stamp
        from harness.paths import home

        # the data stamp too: mmengine resumes from this folder, never from another data set's run
        return (home() / "mmseg" / model.cache_key[:16]
                / f"{self.registry_name}-{self.fingerprint()}-{data_stamp(data_root)[:8]}")

    def precision(self) -> str:
        return "fp16" if self.cfg.amp else "fp32"  # mmengine's AmpOptimWrapper autocasts to fp16

    def run(self, model, data_root: Path) -> list:
        if model.context == "pixels":  # mmseg rebuilds a ViT from weights; pixels have none
            raise NotApplicable(f"{self.registry_name} finetunes a ViT through mmseg; the raw-pixel "
                                "baseline has no network to load")
        if model.device.type == "cpu" and torch.cuda.is_available():
            # mmengine's Runner puts the model on the GPU whenever one is visible
            raise ConfigError(f"{self.registry_name} runs through mmengine, which trains on the GPU when "
                              "torch sees one: run it with --device cuda, or hide the GPUs "
                              "(CUDA_VISIBLE_DEVICES='') to run it on the CPU")
        b = model.backbone
        state = b.backbone_state_dict() if hasattr(b, "backbone_state_dict") else b.state_dict()
        state = {k: v.detach().cpu() for k, v in state.items()}  # mmengine loads them from a file
        arch = dict(getattr(b, "arch_kwargs", {}) or {})
        arch.setdefault("num_heads", b.blocks[0].attn.num_heads)
        work_dir = Path(self.cfg.work_dir) if self.cfg.work_dir else self.default_work_dir(model, data_root)
        runs = run_seg_protocol(state, arch, self.cfg, data_root, work_dir, head=self.HEAD,
                                frozen=self.FROZEN)
        if int(os.environ.get("RANK", os.environ.get("SLURM_PROCID", "0"))) != 0:
            return []  # one set of records per run, written by rank 0
        return to_results(runs, self.cfg)
