"""Unsupervised object discovery with LOST (Siméoni et al., BMVC 2021) and TokenCut (Wang et al.,
CVPR 2022), reported as CorLoc.

As valeoai/LOST's main_lost.py runs it (commit fcedbec): every image of the set at its full
resolution (ToTensor, ImageNet normalisation, then zero-padded at the bottom and right to a
multiple of the patch size), one forward pass, the last block's keys of the patches (a hook on
``blocks[-1].attn.qkv``), LOST's seed, seed expansion over the k = 100 lowest-degree patches and
the box of the seed's connected component (benchmarks/discovery/lost.py). CorLoc is the percentage
of images whose box has IoU >= 0.5 with any ground-truth box; each image's hit is kept for the
bootstrap interval. TokenCut (protocol ``tokencut``) reads the same keys of the same input and
cuts the patch graph instead (benchmarks/discovery/tokencut.py).
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np
import torch
import torchvision.transforms.functional as TF

from benchmarks.discovery.keys import check_has_keys, last_block_features
from benchmarks.discovery.lost import box_iou, corloc_hit, lost
from benchmarks.discovery.tokencut import tokencut
from harness.data.coco20k import COCO20k
from harness.data.transforms import IMAGENET_MEAN, IMAGENET_STD
from harness.data.voc_boxes import VOCBoxes
from harness.errors import ConfigError, DataError
from harness.features.extract import intra_op_threads
from harness.examples import Example, Panel, chosen_items
from harness.io_utils import atomic_write_json
from harness.per_image import hits_block
from harness.presets import load_presets
from harness.protocol import Protocol, ProtocolResult
from harness.registry import DATASETS, register_protocol
from harness.runtime.device import module_device


# the README's commands: `--dataset VOC07 --set trainval`, `VOC12 --set trainval`, `COCO20k --set train`
DEFAULT_SPLITS = {"voc07": "trainval", "voc12": "trainval", "coco20k": "train"}


@dataclass
class DiscoveryConfig:
    dataset: str = "voc2007:boxes"      # voc2007:boxes | voc:boxes | coco:coco20k (or another box reader)
    split: str | None = None            # None: LOST's (DEFAULT_SPLITS: VOC trainval, COCO20k train)
    preset: str | None = None
    which_features: Literal["k", "q", "v"] = "k"  # main_lost.py / main_tokencut.py --which_features
    no_hard: bool = False               # --no_hard (VOC: drop truncated/difficult boxes)
    coco20k_list: str | None = None     # another COCO20k file list (default: LOST's, shipped)
    threads: int | None = None          # torch intra-op threads while running (None: torch's)
    progress: bool = True

    def __post_init__(self):
        if self.which_features not in ("k", "q", "v"):
            raise ValueError(f"which_features must be k, q or v, found {self.which_features!r}")


@dataclass
class Config(DiscoveryConfig):
    k_patches: int = 100                # main_lost.py --k_patches

    def __post_init__(self):
        super().__post_init__()
        if self.k_patches < 1:
            raise ValueError(f"k_patches must be >= 1, found {self.k_patches}")


@dataclass
class TokenCutConfig(DiscoveryConfig):
    tau: float = 0.2                    # main_tokencut.py --tau
    eps: float = 1e-5                   # main_tokencut.py --eps
    binary_graph: bool = True           # False: main_tokencut.py --no-binary-graph (similarities as weights)

    def __post_init__(self):
        super().__post_init__()
        if not -1.0 <= self.tau < 1.0 or self.eps <= 0:
            raise ValueError(f"need -1 <= tau < 1 and eps > 0, found tau {self.tau}, eps {self.eps}")


@dataclass(frozen=True)
class PadToPatchMultiple:
    """main_lost.py's input: the whole image normalised, then zeros appended at the bottom and right
    up to the next multiple of the patch size (the box is clipped back to the image later)."""

    patch_size: int
    mean: tuple = IMAGENET_MEAN
    std: tuple = IMAGENET_STD

    def __call__(self, img) -> torch.Tensor:
        t = TF.normalize(TF.pil_to_tensor(img).float().div_(255.0), self.mean, self.std)
        p = self.patch_size
        h, w = t.shape[-2:]
        out = torch.zeros(3, -(-h // p) * p, -(-w // p) * p)
        out[:, :h, :w] = t
        return out


class DiscoveryProtocol(Protocol):
    """What LOST and TokenCut share: the readers, the padded input, the keys, CorLoc, the panels."""

    NOT_IN_FINGERPRINT = ("threads", "progress")
    CONFORMANCE_RUN = ("synth", {"progress": False}, ".")

    @classmethod
    def conformance_check(cls, model, exported: dict, data_root: Path) -> dict:
        """The synth preset on this protocol's own tiny SynthScenes set (the box layout the tiny
        SynthScenes root lacks), generated once in the cache beside it."""
        from harness.data.declared_synthetic import generate_declared

        preset, values, _ = cls.CONFORMANCE_RUN
        root = generate_declared(cls.registry_name, "tiny", 0, progress=False)
        return cls.from_preset(preset, values).run(model, root)[0].metrics

    @property
    def split(self) -> str:
        return self.cfg.split or DEFAULT_SPLITS.get(self.cfg.dataset, "trainval")

    def reader(self, data_root: Path):
        cfg, split = self.cfg, self.split
        cls = DATASETS.get(cfg.dataset)
        if cfg.no_hard and not issubclass(cls, VOCBoxes):
            raise ConfigError(f"no_hard applies to VOC's truncated/difficult flags; {cfg.dataset} has none")
        if cfg.coco20k_list and not issubclass(cls, COCO20k):
            raise ConfigError(f"coco20k_list is the COCO20k image list; dataset {cfg.dataset} does not read it")
        if issubclass(cls, VOCBoxes):
            return cls(Path(data_root), split, no_hard=cfg.no_hard)
        if issubclass(cls, COCO20k):
            return cls(Path(data_root), split, list_file=cfg.coco20k_list)
        ds = cls(Path(data_root), split)
        if not callable(getattr(ds, "boxes", None)):
            raise ConfigError(f"{self.PANEL} needs ground-truth boxes: dataset {cfg.dataset!r} has no boxes(i); "
                              f"use voc07, voc12 or coco20k")
        return ds

    def find(self, feats: torch.Tensor, grid: tuple[int, int], patch: int, image_hw: tuple[int, int]):
        raise NotImplementedError

    def discover(self, model, image):
        """(Discovery, the transformed input) of one PIL image."""
        backbone = model.backbone
        patch = int(backbone.patch_size)
        x = PadToPatchMultiple(patch)(image)
        grid = (x.shape[-2] // patch, x.shape[-1] // patch)
        feats = last_block_features(backbone, x[None].to(module_device(backbone)), self.cfg.which_features,
                                    self.PANEL, model.name)
        return self.find(feats[0].float(), grid, patch, (image.height, image.width)), x

    def _checked_model(self, model):
        check_has_keys(model.backbone, self.PANEL, model.name)
        model.backbone.eval()

    def run(self, model, data_root) -> list[ProtocolResult]:
        from tqdm.auto import tqdm

        cfg = self.cfg
        self._checked_model(model)
        ds = self.reader(Path(data_root))
        hits, preds, skipped = [], {}, 0
        t0 = time.perf_counter()
        with torch.no_grad(), intra_op_threads(cfg.threads or torch.get_num_threads()):
            for i in tqdm(range(len(ds)), desc=f"{self.registry_name} {cfg.dataset}/{self.split}",
                          disable=not cfg.progress):
                gt = ds.boxes(i)
                if cfg.no_hard and not len(gt):  # main_lost.py: images with only hard objects are skipped
                    skipped += 1
                    continue
                found, _ = self.discover(model, ds.load_image(i))
                hits.append(corloc_hit(found.box, gt))
                preds[str(ds.stems[i])] = [int(v) for v in found.box]
        seconds = time.perf_counter() - t0
        if not hits:
            raise DataError(f"{self.registry_name} evaluated no image of {cfg.dataset}/{self.split} (all skipped as "
                            f"hard)")
        flags = np.asarray(hits, dtype=bool)
        art = self.artifact_dir(model, Path(data_root))
        atomic_write_json(art / "preds.json", preds)
        return [ProtocolResult(
            metrics={"corloc": 100.0 * float(flags.mean())}, dataset=cfg.dataset, split=self.split,
            params={"preset": cfg.preset, "n_images": int(flags.size), "n_found": int(flags.sum()),
                    "n_skipped_hard": skipped, "features": cfg.which_features,
                    "run_fingerprint": self.fingerprint()},
            artifacts={"predictions": str(art / "preds.json")},
            cost={"discover_s": round(seconds, 3), "s_per_image": round(seconds / max(len(ds), 1), 5)},
            per_image=hits_block({"corloc": flags}))]

    def examples(self, model, data_root, count: int = 4, seed: int = 0) -> list[Example]:
        """Each drawn image twice: with its ground-truth boxes (green), and with the found box (red)
        and seed patch (yellow), captioned with the best IoU."""
        self._checked_model(model)
        ds = self.reader(Path(data_root))
        patch = int(model.backbone.patch_size)
        out = []
        with torch.no_grad(), intra_op_threads(self.cfg.threads or torch.get_num_threads()):
            for i in chosen_items(len(ds), count, seed):
                image, gt = ds.load_image(i), ds.boxes(i)
                found, _ = self.discover(model, image)
                rgb = np.asarray(image, dtype=np.uint8)
                row, col = divmod(found.seed, -(-image.width // patch))
                seed_box = (col * patch, row * patch, (col + 1) * patch, (row + 1) * patch)
                iou = float(box_iou(found.box, gt).max()) if len(gt) else 0.0
                out.append(Example(str(ds.stems[i]), [
                    Panel("ground truth", image=draw_boxes(rgb, gt, (0, 220, 0)), text=f"{len(gt)} box(es)"),
                    Panel(self.PANEL, image=draw_boxes(draw_boxes(rgb, [found.box], (230, 0, 0)), [seed_box],
                                                   (250, 220, 0)), text=f"IoU {iou:.2f}")],
                    correct=corloc_hit(found.box, gt)))
        return out


@register_protocol("lost")
class LOST(DiscoveryProtocol):
    Config = Config
    PRESETS = load_presets("lost", Path(__file__).parent / "presets")
    DEFAULT_PRESET = "lost"
    PANEL = "LOST"

    def find(self, feats, grid, patch, image_hw):
        return lost(feats, grid, (patch, patch), image_hw, self.cfg.k_patches)


@register_protocol("tokencut")
class TokenCut(DiscoveryProtocol):
    Config = TokenCutConfig
    PRESETS = load_presets("tokencut", Path(__file__).parent / "presets")
    DEFAULT_PRESET = "tokencut"
    PANEL = "TokenCut"

    def find(self, feats, grid, patch, image_hw):
        c = self.cfg
        return tokencut(feats, grid, (patch, patch), image_hw, c.tau, c.eps, c.binary_graph)


def draw_boxes(rgb: np.ndarray, boxes, colour, width: int = 2) -> np.ndarray:
    """A copy of ``rgb`` with each (x0, y0, x1, y1) box's outline drawn, max exclusive."""
    out = np.array(rgb, copy=True)
    h, w = out.shape[:2]
    for x0, y0, x1, y1 in np.asarray(boxes, dtype=np.int64).reshape(-1, 4):
        x0, y0, x1, y1 = max(int(x0), 0), max(int(y0), 0), min(int(x1), w), min(int(y1), h)
        if x1 <= x0 or y1 <= y0:
            continue
        t = max(1, min(width, (x1 - x0) // 2, (y1 - y0) // 2))
        out[y0:y0 + t, x0:x1] = colour
        out[y1 - t:y1, x0:x1] = colour
        out[y0:y1, x0:x0 + t] = colour
        out[y0:y1, x1 - t:x1] = colour
    return out


__all__ = ["Config", "TokenCutConfig", "LOST", "TokenCut", "PadToPatchMultiple", "draw_boxes"]
