"""Video object segmentation by label propagation on DAVIS-2017 (DINO, iBOT Table 16): the
first frame's mask carried through each video with frozen patch features, scored with J and F
as davisvideochallenge/davis2017-evaluation does.

Presets (presets/davis_*.yaml): ``dino`` (the default) and ``ibot`` are
``eval_video_segmentation.py``'s defaults (the two scripts are the same code); ``synth`` is the
SynthScenes clips' scale. Every default, its official source line and every difference:
README.md.
"""
from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch

from benchmarks.davis import davis_metrics, frames
from benchmarks.davis.propagation import PropagationSettings, propagate_video, segmentation
from harness.data.io import image_size
from harness.features.grid import coarse_grid_flag
from harness.data.synthetic import voc_palette
from harness.errors import ConfigError, DataError
from harness.per_image import ratios_block
from harness.presets import load_presets
from harness.protocol import Protocol, ProtocolResult
from harness.registry import DATASETS, register_protocol
from harness.runtime import device as devices

STATISTICS = ("mean", "recall", "decay")
METRICS = ("JF_mean", "J_mean", "J_recall", "J_decay", "F_mean", "F_recall", "F_decay")


@dataclass
class Config:
    dataset: str = "davis2017"
    split: str = "val"
    preset: str | None = None
    sequences: list[str] | None = None      # a subset of the split's sequences (None: all)
    # --- frames (read_frame / read_seg)
    scale_size: int = 480                   # the shorter side
    size_multiple: int = 64                 # the longer side floored to a multiple of this
    norm_mean: list[float] = field(default_factory=lambda: list(frames.OFFICIAL_MEAN))
    norm_std: list[float] = field(default_factory=lambda: list(frames.OFFICIAL_STD))
    precision: Literal["fp32", "fp16", "bf16"] = "fp32"
    # --- propagation (label_propagation)
    n_last_frames: int = 7
    size_mask_neighborhood: int = 12
    topk: int = 5
    temperature: float = 0.1
    # --- metric (davis2017-evaluation)
    bound_th: float = 0.008
    # --- execution (not in the fingerprint)
    frames_per_batch: int = 1               # the official forwards one frame at a time
    save_masks: bool = False                # write the predicted palette PNGs as artifacts
    artifacts_dir: str | None = None
    progress: bool = True

    def __post_init__(self):
        checks = [
            (self.n_last_frames >= 0, f"n_last_frames must be >= 0, found {self.n_last_frames}"),
            (self.size_mask_neighborhood >= 0, "size_mask_neighborhood must be >= 0"),
            (self.topk >= 1, f"topk must be >= 1, found {self.topk}"),
            (self.temperature > 0, f"temperature must be > 0, found {self.temperature}"),
            (self.scale_size >= 1 and self.size_multiple >= 1, "scale_size and size_multiple must be >= 1"),
            (len(self.norm_mean) == 3 and len(self.norm_std) == 3, "norm_mean/norm_std need 3 values"),
            (self.frames_per_batch >= 1, "frames_per_batch must be >= 1"),
            (0 < self.bound_th < 1 or float(self.bound_th).is_integer(),
             "bound_th is a fraction of the diagonal (< 1) or a whole number of pixels"),
        ]
        for ok, msg in checks:
            if not ok:
                raise ValueError(msg)


# dino, ibot, synth: presets/davis_*.yaml
PRESETS: dict[str, dict[str, Any]] = load_presets("davis", Path(__file__).parent / "presets")


# the short side of the feature grid below which the number says little: the official evaluations
# (480 p frames at stride 8 and 16) propagate labels over 60 and 30 cells; below 8 most objects cover a
# cell or two and J and F measure the upsampling of those cells rather than the features
MIN_GRID_CELLS = 8
MIN_GRID_WHY = ("the official 480 p frames give 60 cells at stride 8 and 30 at stride 16; below 8 most "
                "objects cover a cell or two and J and F measure the upsampling of those cells")


def patch_size_of(model) -> int:
    """The model's patch size (stride of its patch grid); a ConfigError for a model without one."""
    backbone = getattr(model, "backbone", None)
    patch = getattr(backbone, "patch_size", None)
    if not patch or not callable(getattr(backbone, "get_features", None)):
        raise ConfigError(f"model {getattr(model, 'name', model)!r} has no patch grid (no patch_size / get_features); "
                          "label propagation needs patch features (a ViT, CNN or Swin backbone)")
    return int(patch)


@dataclass
class Geometry:
    ori: tuple[int, int]      # (H, W) on disk
    frame: tuple[int, int]    # the network input (read_frame)
    grid: tuple[int, int]     # the feature grid
    label: tuple[int, int]    # read_seg's size before dividing by the patch


@register_protocol("davis")
class VideoSegmentation(Protocol):
    Config = Config
    PRESETS = PRESETS
    DEFAULT_PRESET = "dino"
    NOT_IN_FINGERPRINT = ("frames_per_batch", "save_masks", "artifacts_dir", "progress")

    def settings_for_propagation(self) -> PropagationSettings:
        c = self.cfg
        return PropagationSettings(c.n_last_frames, c.size_mask_neighborhood, c.topk, c.temperature)

    def geometry(self, ds, seq, patch: int, model_name: str | None = None) -> Geometry:
        """The sizes of one sequence, checked: one frame size throughout, a network input that
        is a multiple of the patch size, a label grid with as many cells as the feature grid."""
        c = self.cfg
        if len(seq.frames) < 3:
            raise DataError(f"sequence {seq.name!r} has {len(seq.frames)} frame(s); the DAVIS evaluation leaves out "
                            "the first and the last frame, so a sequence needs at least 3")
        sizes = {image_size(p) for p in seq.frames}
        if len(sizes) != 1:
            raise DataError(f"sequence {seq.name!r} mixes frame sizes {sorted(sizes)} (width x height); "
                            "the official script resizes every frame to the first frame's size")
        w, h = sizes.pop()
        th, tw = frames.frame_size(h, w, c.scale_size, c.size_multiple)
        if th % patch or tw % patch or th < patch or tw < patch:
            lower, upper = max(patch, c.scale_size // patch * patch), (c.scale_size // patch + 1) * patch
            raise ConfigError(f"davis: sequence {seq.name!r}: frames {w}x{h} become {tw}x{th} (scale_size "
                              f"{c.scale_size}, size_multiple {c.size_multiple}), not a multiple of the stride {patch}"
                              f"{f' of model {model_name}' if model_name else ''}; set scale_size={lower} or {upper} "
                              f"and size_multiple={patch} (--set scale_size=N --set size_multiple={patch}; in a suite "
                              f"--set davis.scale_size=N --set davis.size_multiple={patch})")
        lh, lw = frames.label_size(h, w, c.scale_size, c.size_multiple)
        if (lh // patch) * (lw // patch) != (th // patch) * (tw // patch):
            raise ConfigError(f"sequence {seq.name!r}: its labels ({lw // patch}x{lh // patch} patches) and its "
                              f"frames ({tw // patch}x{th // patch} patches) have different grids at "
                              f"scale_size {c.scale_size}")
        return Geometry((h, w), (th, tw), (th // patch, tw // patch), (lh, lw))

    def run(self, model, data_root) -> list[ProtocolResult]:
        c = self.cfg
        patch = patch_size_of(model)
        ds = DATASETS.get(c.dataset)(Path(data_root), c.split)
        seqs = self._selected(ds)
        geos = [self.geometry(ds, s, patch, model.name) for s in seqs]   # every check before any forward pass
        backbone = model.backbone.eval()
        dev = devices.module_device(backbone)
        timings = {"extract_s": 0.0, "propagate_s": 0.0, "metrics_s": 0.0}
        art = self.artifact_dir(model, Path(data_root), c.artifacts_dir) if c.save_masks else None
        per_seq = []
        with torch.no_grad():
            for seq, geo in zip(seqs, geos):
                pred = self._segment(backbone, dev, ds, seq, geo, patch, timings)
                t0 = time.perf_counter()
                gt = np.stack([ds.annotation(seq, t) for t in range(len(seq.frames))])
                try:
                    res = davis_metrics.evaluate_sequence(gt, pred, c.bound_th)
                except ValueError as exc:
                    raise DataError(f"sequence {seq.name!r}: {exc}") from None
                timings["metrics_s"] += time.perf_counter() - t0
                per_seq.append((seq.name, res))
                if art is not None:
                    _save_masks(art / seq.name, seq, pred)
                if c.progress:
                    print(f"[davis] {seq.name}: J {100 * np.mean(res['J']):.1f} F {100 * np.mean(res['F']):.1f}",
                          file=sys.stderr)
        result = self._result(per_seq, geos, timings, art)
        smallest = min(geos, key=lambda g: min(g.grid))
        flag = coarse_grid_flag("davis", smallest.grid, MIN_GRID_CELLS, MIN_GRID_WHY, model.name, patch, smallest.frame)
        result.flags = [flag] if flag else []
        return [result]

    def _selected(self, ds) -> list:
        wanted = self.cfg.sequences
        if not wanted:
            return list(ds.sequences)
        by_name = {s.name: s for s in ds.sequences}
        unknown = [n for n in wanted if n not in by_name]
        if unknown:
            raise ConfigError(f"sequences {unknown} are not in {ds.split!r} ({', '.join(by_name)})")
        return [by_name[n] for n in wanted]

    def _segment(self, backbone, dev, ds, seq, geo: Geometry, patch: int, timings) -> np.ndarray:
        """(T, H, W) uint8 labels: frame 0's annotation as given, the rest propagated."""
        c = self.cfg
        n = len(seq.frames)
        cache: dict[int, torch.Tensor] = {}

        def features(t: int) -> torch.Tensor:
            if t not in cache:
                t0 = time.perf_counter()
                stop = min(n, t + c.frames_per_batch)
                x = torch.stack([frames.frame_tensor(ds.frame(seq, k), geo.frame, c.norm_mean, c.norm_std)
                                 for k in range(t, stop)]).to(dev)
                with devices.autocast(dev, c.precision):
                    p = backbone.get_features(x, n_last_blocks=1, final_norm=True).patches
                p = p[:, 0].float()
                for k in range(t, stop):
                    cache[k] = p[k - t].reshape(-1, p.shape[-1])
                timings["extract_s"] += time.perf_counter() - t0
            return cache.pop(t)

        first_mask = ds.annotation(seq, 0)
        first_seg = frames.first_frame_labels(first_mask, geo.label, patch).to(dev)
        out = np.zeros((n, *geo.ori), np.uint8)
        out[0] = first_mask
        h, w = geo.grid
        t0, extract0 = time.perf_counter(), timings["extract_s"]
        for t, seg in propagate_video(features, n, h, w, first_seg, self.settings_for_propagation()):
            out[t] = segmentation(seg, patch, geo.ori)
        timings["propagate_s"] += time.perf_counter() - t0 - (timings["extract_s"] - extract0)
        return out

    def _result(self, per_seq, geos, timings, art) -> ProtocolResult:
        c = self.cfg
        objects, num, den = {}, {m: [] for m in METRICS}, {m: [] for m in METRICS}
        for name, res in per_seq:
            stats = {m: [] for m in METRICS}
            for k in range(res["J"].shape[0]):
                j = davis_metrics.statistics(res["J"][k])
                f = davis_metrics.statistics(res["F"][k])
                for s, jv, fv in zip(STATISTICS, j, f):
                    stats[f"J_{s}"].append(jv)
                    stats[f"F_{s}"].append(fv)
                stats["JF_mean"].append((j[0] + f[0]) / 2)
                objects[f"{name}_{k + 1}"] = {"J_mean": round(j[0], 6), "F_mean": round(f[0], 6)}
            for m in METRICS:
                num[m].append(float(np.sum(stats[m])))
                den[m].append(len(stats[m]))
        n_obj = sum(den["J_mean"])
        if n_obj == 0:
            raise DataError("no object to evaluate: every first annotation is background only")
        metrics = {m: 100.0 * float(np.sum(num[m])) / n_obj for m in METRICS}
        # the official global (J&F)m is the mean of Jm and Fm
        metrics["JF_mean"] = (metrics["J_mean"] + metrics["F_mean"]) / 2
        params = {"preset": c.preset, "n_sequences": len(per_seq), "n_objects": n_obj,
                  "frame_sizes": sorted({f"{g.frame[1]}x{g.frame[0]}" for g in geos}),
                  "objects": objects, "interval_over": "sequences (objects summed within each)"}
        return ProtocolResult(metrics=metrics, dataset=c.dataset, split=c.split, params=params,
                              artifacts={"masks": str(art)} if art is not None else {},
                              cost={k: round(v, 3) for k, v in timings.items()},
                              per_image=ratios_block(num, den, scale={m: 100.0 for m in METRICS}))


def _save_masks(folder: Path, seq, pred: np.ndarray) -> None:
    from PIL import Image

    folder.mkdir(parents=True, exist_ok=True)
    palette = voc_palette()  # DAVIS colours its objects with the VOC map (davis2017 utils.color_map)
    for t, frame in enumerate(seq.frames):
        im = Image.fromarray(pred[t])
        im.putpalette(palette)
        im.save(folder / f"{frame.stem}.png", format="PNG")


__all__ = ["Config", "PRESETS", "VideoSegmentation", "patch_size_of"]
