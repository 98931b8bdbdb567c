"""Probe3D's SPair-71k steps (evaluate_spair_correspondence.py, evals/datasets/spair.py), in this
project's own code: which pairs are evaluated, how an image becomes the model's input, and how a
pair's keypoints are matched and scored."""
from __future__ import annotations

import random
from dataclasses import asdict, dataclass

import numpy as np
import torch
import torch.nn.functional as F
import torchvision.transforms.functional as TF
from PIL import Image

from harness.config import fingerprint
from harness.data.transforms import IMAGENET_MEAN, IMAGENET_STD, interpolation_mode
from harness.errors import ConfigError, NotApplicable


def select_pairs(pairs: list, category: str, viewpoint: int | None, num_instances: int | None, seed: int) -> list:
    """The pairs of ``category`` (with ``viewpoint`` variation, None: any), shuffled with Python's
    ``random.seed(seed)`` and cut to ``num_instances`` (None or 0: all), as SPairDataset does.
    ``pairs`` come in file-name order; Probe3D's come in ``glob.glob`` order, the directory's
    listing order, which the shuffle then permutes (benchmarks/correspondence/README.md)."""
    chosen = [p for p in pairs if p.category == category]
    if viewpoint is not None:
        chosen = [p for p in chosen if p.viewpoint == viewpoint]
    if num_instances:
        random.Random(seed).shuffle(chosen)  # the module-level random.seed(20); random.shuffle
        chosen = chosen[:num_instances]
    return chosen


@dataclass(frozen=True)
class SquareResize:
    """spair.py's image path: pad the bottom and right with ``pad_value`` to a square, resize to
    ``image_size`` (PIL bicubic, antialiased), normalise; then the model wrapper's
    ``center_padding`` (zeros, split evenly, the odd pixel at the bottom/right) to a multiple of
    the patch size."""

    image_size: int
    patch_size: int
    pad_value: int = 255
    mean: tuple = IMAGENET_MEAN
    std: tuple = IMAGENET_STD
    fixed_size = True

    def __call__(self, img: Image.Image) -> torch.Tensor:
        a = np.asarray(img.convert("RGB"))
        h, w, _ = a.shape
        side = max(h, w)
        a = np.pad(a, ((0, side - h), (0, side - w), (0, 0)), constant_values=self.pad_value)
        square = TF.resize(Image.fromarray(a), [self.image_size, self.image_size],
                           interpolation=interpolation_mode("bicubic"), antialias=True)
        x = TF.normalize(TF.to_tensor(square), list(self.mean), list(self.std))
        return center_padding(x, self.patch_size)

    def fingerprint(self) -> str:
        return fingerprint({"kind": "probe3d_spair_square", **asdict(self)})


def center_padding(x: torch.Tensor, patch: int) -> torch.Tensor:
    dh, dw = (-x.shape[-2]) % patch, (-x.shape[-1]) % patch
    if not dh and not dw:
        return x
    return F.pad(x, (dw // 2, dw - dw // 2, dh // 2, dh - dh // 2))


def scaled_keypoints(kps: np.ndarray, original_hw: tuple[int, int], image_size: int) -> np.ndarray:
    """Keypoints in the resized square: x, y times image_size / the padded side, truncated back to
    integers (spair.py assigns the float product into its int tensor)."""
    out = kps.copy()
    side = max(original_hw)
    # int tensor * int, then / int: torch's true division in float32, truncated on assignment
    out[:, :2] = np.trunc((kps[:, :2] * image_size).astype(np.float32) / np.float32(side))
    return out


def threshold_scale(box: tuple, target_size: tuple) -> float:
    """The target box's longer side over the target image's longer side (use_bbox False)."""
    x1, y1, x2, y2 = box
    return float(max(x2 - x1, y2 - y1)) / max(target_size)


@torch.no_grad()
def match_keypoints(feats_src: torch.Tensor, feats_trg: torch.Tensor, kps_src: np.ndarray, kps_trg: np.ndarray,
                    image_size: int) -> tuple[torch.Tensor, torch.Tensor, np.ndarray]:
    """(predicted, true) target positions in [0, 1] of the keypoints visible in both images, and
    which keypoints those are (evaluate_spair_correspondence.py compute_errors).

    ``feats_*``: (d, h, w) patch features. Both maps are L2-normalised per position; each source
    keypoint's feature is sampled bilinearly at its position divided by ``image_size`` with
    ``align_corners=True`` (the grid's corner patches' centres on the image's edges); its match
    is the target position of highest dot product, read as (column, row) / grid width, the
    patch's top-left corner (Probe3D's quirks, reproduced)."""
    both = (kps_src[:, 2] == 1) & (kps_trg[:, 2] == 1)
    if not both.any():
        return torch.zeros(0, 2), torch.zeros(0, 2), both
    src = F.normalize(feats_src.float(), p=2, dim=0)
    trg = F.normalize(feats_trg.float(), p=2, dim=0)
    p_src = torch.from_numpy(kps_src[both, :2].astype(np.float32)) / image_size
    p_trg = torch.from_numpy(kps_trg[both, :2].astype(np.float32)) / image_size
    grid = (p_src * 2 - 1)[None, None]
    sampled = F.grid_sample(src[None], grid, mode="bilinear", align_corners=True)[0, :, 0].t()  # (k, d)
    heat = torch.einsum("kf,fhw->khw", sampled, trg)
    flat = heat.flatten(1).argmax(dim=1)
    w = heat.shape[-1]
    pred = torch.stack([flat % w, torch.div(flat, w, rounding_mode="floor")], dim=1).float() / trg.shape[-1]
    return pred, p_trg, both


def pair_errors(feats_src: torch.Tensor, feats_trg: torch.Tensor, kps_src: np.ndarray, kps_trg: np.ndarray,
                image_size: int, scale: float) -> np.ndarray:
    """Errors, in units of the target box's longer side, of the keypoints visible in both images,
    in keypoint order (compute_errors' ``error_same``; float32 as there)."""
    pred, true, _ = match_keypoints(feats_src, feats_trg, kps_src, kps_trg, image_size)
    return ((pred - true).norm(p=2, dim=-1) / scale).double().numpy()


def within(errors: np.ndarray, alpha: float) -> np.ndarray:
    """errors < alpha as Probe3D compares them: a float32 tensor against a Python float (float32)."""
    return errors.astype(np.float32) < np.float32(alpha)


def patch_stride(backbone, protocol: str, size_name: str, size: int) -> int:
    """The model's patch size; a model without a patch grid (NotApplicable), or an input ``size``
    smaller than one patch (ConfigError), is refused before data is read."""
    patch = getattr(backbone, "patch_size", None)
    if not callable(getattr(backbone, "get_features", None)) or not isinstance(patch, int) or patch < 1:
        raise NotApplicable(f"{protocol} matches patch features; {type(backbone).__name__} gives no "
                            f"patch grid (no get_features with a patch_size)")
    if size < patch:
        raise ConfigError(f"{protocol}: {size_name} {size} is smaller than the model's patch size {patch}; "
                          f"choose {size_name} >= {patch}")
    return patch
