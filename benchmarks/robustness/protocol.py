"""Robustness of a linear ImageNet classifier (``robustness``; iBOT Table 8, bytedance/ibot @ da316d8
``analysis/``): the linear head is trained as the ``linear`` protocol trains it (both are
harness.probes.linear_probe's LinearGridProbe; this one has more to report), then the head that
its recipe selects is scored on shifted sets, each one result (variant ``shift``):

- ``imagenet``: the clean validation split (the linear protocol's own number);
- ``imagenet_a``, ``imagenet_r`` (200 classes: the argmax over their columns), ``sketch``, ``v2``,
  ``real`` (multi-label ReaL): benchmarks.robustness.class_maps;
- ``imagenet_c``: the mCE, lower is better (benchmarks.robustness.corruption);
- ``bg_<variant>``: the backgrounds challenge, 1000-way argmax mapped to IN-9 (``bg_original`` is
  Table 8's IN-9 column);
- ``occlusion_salient`` / ``occlusion_non_salient``: patch drop (benchmarks.robustness.patch_drop).

The head (analysis/README.md, combine_ckpt.py): of the recipe's learning-rate grid, the head with
the best top-1 on the validation split (``best_acc_hidx``) with its weights at the evaluation that
reached it (eval_linear_multi.py saves only then; ties: the later epoch, the last head). Each set's transform is its
official script's (benchmarks/robustness/README.md). Relative set paths are under the data root.
"""
from __future__ import annotations

import copy
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import numpy as np
import torch

from harness.probes.labelled_features import assemble, load_splits
from harness.probes.linear_data import STREAM_INIT, seeded_generator
from harness.probes.linear_grid import GridSGD, LinearHeads, train_grid
from harness.probes.linear_probe import LinearConfig, LinearGridProbe
from benchmarks.robustness import evaluation
from benchmarks.robustness.corruption import CORRUPTIONS_15, CORRUPTIONS_19, NORMALIZERS, SEVERITIES
from benchmarks.robustness.head_file import load_head_file
from benchmarks.robustness.occlusion import drop_and_score
from benchmarks.robustness.patch_drop import DROPS
from benchmarks.robustness.sizes import OCCLUSION, check_native_sizes, check_saliency_stride
from harness.features.attention import missing_attention, require_attention
from benchmarks.robustness.transforms import CenterCropOnly
from harness.data.transforms import IMAGENET_MEAN, IMAGENET_STD, ResizeCenterCrop
from harness.errors import ConfigError
from harness.features.extract import batch_features, extract_features
from harness.per_image import accuracy_percent, hits_block
from harness.presets import load_presets, presets_folder
from harness.protocol import Protocol, ProtocolResult
from harness.registry import register_protocol
from harness.runtime.device import module_device

SHIFTS = ("imagenet_a", "imagenet_r", "sketch", "v2", "real", "imagenet_c", "backgrounds", "occlusion")
BG_VARIANTS = ("original", "only_fg", "mixed_same", "mixed_rand", "mixed_next", "no_fg", "only_bg_b", "only_bg_t")


@dataclass
class RobustnessConfig(LinearConfig):
    shifts: list[str] = field(default_factory=lambda: ["imagenet_a", "imagenet_c", "backgrounds", "occlusion"])
    # ---- where each set is (relative: under the data root)
    imagenet_a_root: str = "imagenet-a"
    imagenet_r_root: str = "imagenet-r"
    sketch_root: str = "imagenet-sketch"
    v2_root: str = "imagenetv2-matched-frequency"
    real_labels: str = "real.json"
    imagenet_c_root: str = "imagenet-c"
    backgrounds_root: str = "bg_challenge"
    # ---- IN-A / IN-R / Sketch / v2: hendrycks' eval.py, Resize(256) (torchvision's default bilinear)
    shift_interpolation: Literal["bicubic", "bilinear"] = "bilinear"
    # ---- ImageNet-C: iBOT's test.py copy, unnormalised over 19 distortions; alexnet: the benchmark's mCE
    ce_normalizer: str = "none"
    corruptions: list[str] | None = None   # None: 19 with "none", the 15 with "alexnet"
    severities: list[int] = field(default_factory=lambda: list(SEVERITIES))
    # ---- backgrounds challenge: MadryLab's in_to_in9.json, or set folders named as training classes
    bg_variants: list[str] = field(default_factory=lambda: list(BG_VARIANTS))
    in9_mapping: Literal["madrylab", "by_name"] = "madrylab"
    # ---- occlusion (Naseer et al. --dino): attention mass 0.5, head 1, Resize(256) bilinear
    occlusion_mass: float = 0.5
    occlusion_drops: list[str] = field(default_factory=lambda: list(DROPS))
    saliency: str = "self"                 # "self", a model spec (zoo:dino_vits16) or an .npy of attention rows
    saliency_head: int = 1
    occlusion_interpolation: Literal["bicubic", "bilinear"] = "bilinear"
    # what a dropped pixel becomes: 0 of the normalised image (iBOT's copy: the mean colour), or
    # black (Naseer et al.'s evaluate.py, which normalises inside the model): an opt-in difference
    occlusion_fill: Literal["normalized_zero", "black"] = "normalized_zero"
    # a trained head to take instead of training one (benchmarks.robustness.head_file); relative: under the data root
    head_checkpoint: str = ""
    # keep the shifted sets' features in the feature cache (execution only): off by default, ImageNet-C's
    # 95 folders of 50,000 images would hold ~30 GB of ViT-S features
    cache_shifted: bool = False

    def __post_init__(self):
        super().__post_init__()
        bad = [s for s in self.shifts if s not in SHIFTS]
        if bad:
            raise ValueError(f"unknown shift(s) {bad}; choose among {list(SHIFTS)}")
        if self.ce_normalizer not in NORMALIZERS:
            raise ValueError(f"ce_normalizer must be one of {list(NORMALIZERS)}, found {self.ce_normalizer!r}")
        if [d for d in self.occlusion_drops if d not in DROPS] or not 0 < self.occlusion_mass <= 1:
            raise ValueError(f"occlusion_drops must be among {list(DROPS)} and 0 < occlusion_mass <= 1")
        if [v for v in self.bg_variants if v not in BG_VARIANTS]:
            raise ValueError(f"bg_variants must be among {list(BG_VARIANTS)}, found {self.bg_variants}")

    def corruption_list(self) -> list[str]:
        if self.corruptions is not None:
            return list(self.corruptions)
        return list(CORRUPTIONS_19 if self.ce_normalizer == "none" else CORRUPTIONS_15)


def _presets() -> dict[str, dict]:
    """benchmarks/robustness/presets/robustness_*.yaml, each on top of the linear recipe it names (``recipe``)."""
    out = {}
    # the linear protocol's recipes, read as data (found through its declaration, not an import of its folder)
    linear = load_presets("linear", presets_folder("linear"))
    for name, values in load_presets("robustness", Path(__file__).parent / "presets").items():
        recipe = values.get("recipe")
        if recipe not in linear:
            raise ConfigError(f"robustness preset {name!r}: recipe {recipe!r} is no linear preset")
        out[name] = {**linear[recipe], **values}
    return out


def head_state(heads: LinearHeads, h: int) -> dict:
    """A copy of head h as it is now: its weights, bias and (shared) BatchNorm in eval mode."""
    bn = copy.deepcopy(heads.bn).eval() if heads.bn is not None else None
    return {"weight": heads.weight[h].detach().clone(), "bias": heads.bias[h].detach().clone(), "bn": bn}


@register_protocol("robustness")
class Robustness(LinearGridProbe):
    Config = RobustnessConfig
    CONFORMANCE_RUN = None
    NOT_IN_FINGERPRINT = LinearGridProbe.NOT_IN_FINGERPRINT + ("shifts", "cache_shifted")
    PRESETS = _presets()
    DEFAULT_PRESET = "ibot"

    def chance_results(self, data_root: Path) -> list[ProtocolResult]:
        """No chance row: a shifted set's chance level is not the clean split's (the base's refusal)."""
        return Protocol.chance_results(self, data_root)

    def _train_heads(self, lrs, batches, val_x, val_y, num_classes, steps, device, **extra):
        """The linear protocol's grid (the same pieces), keeping the head the shifted sets are
        scored with: eval_linear_multi.py saves the grid whenever an evaluation's best top-1 is >=
        the best so far, with ``best_acc_hidx`` the last head reaching that evaluation's best (its
        ``>=``); combine_ckpt.py takes that head from that save."""
        c = self.cfg
        heads = LinearHeads(len(lrs), val_x.shape[1], num_classes, batchnorm=c.batchnorm, init_std=c.init_std,
                            generator=seeded_generator(c.seed, STREAM_INIT)).to(device)
        opt = GridSGD(heads, torch.tensor(lrs, dtype=torch.float64, device=device), momentum=c.momentum,
                      weight_decay=c.weight_decay)
        kept = {"best": -math.inf}

        def on_epoch(epoch: int, hist) -> None:
            self._log_epoch(epoch, hist)
            if hist.epochs and hist.epochs[-1] == epoch + 1 and max(hist.top1[-1]) >= kept["best"]:
                row = hist.top1[-1]
                h = max(j for j, v in enumerate(row) if v == max(row))
                kept.update(best=max(row), epoch=epoch + 1, head=h, state=head_state(heads, h))

        hist = train_grid(heads, opt, batches, val_x, val_y, epochs=c.epochs, steps_per_epoch=steps,
                          schedule=c.lr_schedule, eval_every=c.eval_every, on_epoch=on_epoch, **extra)
        self._kept = kept
        return hist

    def run(self, model, data_root: Path) -> list[ProtocolResult]:
        c = self.cfg
        if getattr(c, "selection_holdout", 0):
            raise ConfigError("robustness scores the head the recipe selects on the validation split (iBOT's); "
                              "selection_holdout is not supported here, set it to 0")
        data_root = Path(data_root)
        self._check_before_work(model, data_root)  # before the head is trained, not after
        if c.head_checkpoint:
            return self._with_head_file(model, data_root)
        clean = super().run(model, data_root)[0]
        clean.variant = {"shift": "imagenet"}
        kept = self._kept
        clean.params["shift_head"] = {"index": kept["head"], "base_lr": c.base_lrs[kept["head"]],
                                      "epoch": kept["epoch"], "top1": kept["best"]}
        return [clean] + self._frozen(model, lambda: self._shifted(model, data_root, kept["state"]))

    def _frozen(self, model, work):
        backbone = model.backbone
        was_training = backbone.training
        backbone.eval()
        try:
            return work()
        finally:
            backbone.train(was_training)

    def _with_head_file(self, model, root: Path) -> list[ProtocolResult]:
        """Every set, the clean split included, scored with the checkpoint's head (no training)."""
        c = self.cfg
        path = Path(c.head_checkpoint) if Path(c.head_checkpoint).is_absolute() else root / c.head_checkpoint
        splits = load_splits(c.dataset, root, c.train_split, c.val_split)
        n_blocks, avgpool = self.feature_choice(model)
        dim = model.backbone.embed_dim * (n_blocks + int(avgpool))
        taken = load_head_file(path, dim, splits.num_classes)
        state = {**taken["state"], "weight": taken["state"]["weight"].to(module_device(model.backbone)),
                 "bias": taken["state"]["bias"].to(module_device(model.backbone))}

        def work():
            of_source, _ = self._probe(model, state)
            scorer = evaluation.Scorer(of_source, list(splits.classes), c.seed, c.dataset, c.val_split)
            hits = of_source(splits.val, self.val_transform(), "clean").argmax(1).cpu().numpy() == splits.val_labels
            clean = scorer.result("imagenet", hits, c.dataset, c.val_split,
                                  shift_head={k: taken[k] for k in ("head", "epoch", "best", "sha256")})
            return [clean] + self._shifted(model, root, state)
        return self._frozen(model, work)

    # ------------------------------------------------------------------ the shifted sets
    def _probe(self, model, state: dict):
        """(logits of a source, logits of an image batch) with the kept head (``head_state``)."""
        c = self.cfg
        n_blocks, avgpool = self.feature_choice(model)

        def head_logits(x: torch.Tensor) -> torch.Tensor:
            x = x.to(state["weight"].device)
            if state["bn"] is not None:
                x = state["bn"](x)
            return x @ state["weight"].T + state["bias"]

        @torch.no_grad()
        def of_source(source, transform, desc):
            keep = c.cache and (c.cache_shifted or desc in ("clean", "real"))  # the clean split's: the linear run's
            f = extract_features(model, source, transform, n_last_blocks=n_blocks, final_norm=True,
                                 batch_size=c.feature_batch_size, num_workers=c.num_workers,
                                 cache=keep,
                                 progress=c.progress, precision=c.precision, desc=f"robustness {desc}")
            return head_logits(assemble(f.cls, f.patch_mean, n_last_blocks=n_blocks, avgpool=avgpool,
                                        layout=c.feature_layout))

        @torch.no_grad()
        def of_batch(x):
            cls, pm = batch_features(model.backbone, x, n_last_blocks=n_blocks, precision=c.precision)
            return head_logits(assemble(cls, pm, n_last_blocks=n_blocks, avgpool=avgpool, layout=c.feature_layout))
        return of_source, of_batch

    def _shifted(self, model, root: Path, state: dict) -> list[ProtocolResult]:
        c = self.cfg
        of_source, of_batch = self._probe(model, state)
        splits = load_splits(c.dataset, root, c.train_split, c.val_split)
        scorer = evaluation.Scorer(of_source, list(splits.classes), c.seed, c.dataset, c.val_split)
        shift_tf = ResizeCenterCrop(resize=c.resize, crop=c.crop, interpolation=c.shift_interpolation)
        at = {"imagenet_a": c.imagenet_a_root, "imagenet_r": c.imagenet_r_root, "sketch": c.sketch_root}
        out = []
        for shift in c.shifts:
            if shift in at:
                out.append(evaluation.score_subset(scorer, shift, root / at[shift], shift_tf))
            elif shift == "v2":
                out.append(evaluation.score_v2(scorer, root / c.v2_root, shift_tf))
            elif shift == "real":
                out.append(evaluation.score_real(scorer, splits.val, self.val_transform(), root / c.real_labels))
            elif shift == "imagenet_c":
                out.append(evaluation.score_corruptions(scorer, root / c.imagenet_c_root, CenterCropOnly(c.crop),
                                                        c.corruption_list(), c.severities, c.ce_normalizer))
            elif shift == "backgrounds":
                out += evaluation.score_backgrounds(scorer, root / c.backgrounds_root, CenterCropOnly(0),
                                                    c.bg_variants, c.in9_mapping)
            else:
                out += self._occlusion(model, root, splits, scorer, of_batch)
        return out

    def _fill(self) -> torch.Tensor | None:
        """None: zeros of the normalised image; black: (0 - mean) / std per channel."""
        if self.cfg.occlusion_fill == "normalized_zero":
            return None
        return -torch.tensor(IMAGENET_MEAN) / torch.tensor(IMAGENET_STD)

    def _saliency(self, model, root: Path, device):
        """``self``: the evaluated model; a path ending in .npy: stored attention rows (under the data
        root when relative); anything else: a model spec (``zoo:dino_vits16``, the official script's
        ``dino_small(pretrained=True)``), built through harness.models.sources."""
        spec = self.cfg.saliency
        if spec == "self":
            return model.backbone
        if spec.endswith(".npy"):
            return Path(spec) if Path(spec).is_absolute() else root / spec
        from harness.models.sources import build_model

        return build_model(spec).backbone.to(device).eval()

    # ------------------------------------------------------------------ what cannot run, found first
    def _check_before_work(self, model, root: Path) -> None:
        """Every input size fed to the model (the backgrounds at their native size) and to the
        saliency model, against their strides; whether occlusion applies (``self._occlusion_skip``:
        why not, for a model without the attention its saliency reads: that part alone is left out)."""
        c = self.cfg
        self._occlusion_skip = self._saliency_model = None
        if "backgrounds" in c.shifts:
            check_native_sizes(model, root / c.backgrounds_root, c.bg_variants, c.shifts)
        if "occlusion" not in c.shifts or c.saliency.endswith(".npy"):
            return
        if c.saliency == "self":
            self._occlusion_skip = missing_attention(model.backbone, OCCLUSION, model.name)
            return
        from harness.models.sources import build_model

        saliency = build_model(c.saliency, name="saliency").backbone.to(module_device(model.backbone)).eval()
        require_attention(saliency, "saliency")
        check_saliency_stride(c.crop, int(saliency.patch_size), c.saliency, model.name)
        self._saliency_model = saliency

    def _occlusion_not_applicable(self) -> list[ProtocolResult]:
        """One record per drop, its top1 null with the reason (harness.results.records)."""
        c = self.cfg
        why = {"top1": f"not applicable: {self._occlusion_skip}"}
        return [ProtocolResult(metrics={"top1": None}, metrics_undefined=why, dataset=c.dataset, split=c.val_split,
                               seed=c.seed, variant={"shift": f"occlusion_{drop}"},
                               params={"saliency": c.saliency, "occlusion_mass": c.occlusion_mass})
                for drop in c.occlusion_drops]

    def _occlusion(self, model, root: Path, splits, scorer, of_batch) -> list[ProtocolResult]:
        c = self.cfg
        if getattr(self, "_occlusion_skip", None):
            return self._occlusion_not_applicable()
        tf = ResizeCenterCrop(resize=c.resize, crop=c.crop, interpolation=c.occlusion_interpolation)
        device = module_device(model.backbone)
        saliency = getattr(self, "_saliency_model", None) or self._saliency(model, root, device)
        # the patch grid the drops are made on: the saliency model's (stored rows: the evaluated model's)
        stride = int(getattr(saliency, "patch_size", model.backbone.patch_size))
        scored = drop_and_score(saliency, splits.val, splits.val_labels, tf, of_batch,
                                stride=stride, mass=c.occlusion_mass, drops=c.occlusion_drops,
                                head=c.saliency_head, batch_size=c.feature_batch_size, device=device,
                                fill=self._fill())
        out = []
        for drop, (hits, fraction) in scored.items():
            out.append(ProtocolResult(
                metrics={"top1": float(accuracy_percent(hits.sum(), hits.size))}, dataset=c.dataset,
                split=c.val_split, seed=c.seed, variant={"shift": f"occlusion_{drop}"},
                per_image=hits_block({"top1": hits}),
                params={"n_images": int(hits.size), "occlusion_mass": c.occlusion_mass, "saliency": c.saliency,
                        "saliency_head": c.saliency_head, "information_loss": float(np.mean(fraction))}))
        return out



__all__ = ["Robustness", "RobustnessConfig", "SHIFTS", "BG_VARIANTS"]
