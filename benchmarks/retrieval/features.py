"""Image-level features as the official scripts compute them.

- retrieval (eval_image_retrieval.py): the image shrunk with PIL's ``thumbnail`` to fit
  ``imsize`` x ``imsize`` (aspect kept, never enlarged, Lanczos: the script's ANTIALIAS),
  ToTensor + ImageNet normalisation, the final-normed [CLS] token; multi-scale
  (utils.multi_scale) sums it over the scales 1, 1/sqrt(2), 1/2 of the normalised tensor
  (bilinear, align_corners False); L2 normalisation last.
- copy detection (eval_copy_detection.py): a square bicubic resize to ``imsize``, the
  final-normed [CLS] token concatenated with the GeM (p = 4, clamped at 1e-6) of the final-normed
  patch tokens; whitening (utils.PCA, whit 0.5) learned on a separate image set, L2 last.

The ViT's patch embedding drops the rows and columns past the last whole patch; the
transform drops them before the model (the front door asks for whole patches), which is the same
computation.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np
import torch
from PIL import Image

from harness.config import fingerprint
from harness.errors import DataError
from harness.data.transforms import IMAGENET_MEAN, IMAGENET_STD, TF, interpolation_mode

MULTISCALES = (1.0, 1 / math.sqrt(2), 0.5)  # utils.multi_scale: [1, 1/2**(1/2), 1/2]


@dataclass(frozen=True)
class ThumbnailScale:
    """eval_image_retrieval.py's preprocessing at one of multi_scale's scales."""

    imsize: int = 224
    scale: float = 1.0
    patch_size: int = 16
    mean: tuple = IMAGENET_MEAN
    std: tuple = IMAGENET_STD
    fixed_size = False

    def __call__(self, img: Image.Image) -> torch.Tensor:
        img = img.copy()
        img.thumbnail((self.imsize, self.imsize), Image.LANCZOS)
        x = TF.normalize(TF.pil_to_tensor(img).float().div_(255.0), self.mean, self.std)
        if self.scale != 1.0:
            x = torch.nn.functional.interpolate(x[None], scale_factor=self.scale, mode="bilinear",
                                                align_corners=False)[0]
        p = self.patch_size
        h, w = x.shape[-2] // p * p, x.shape[-1] // p * p
        if h == 0 or w == 0:
            raise DataError(f"an image of {img.width}x{img.height} at scale {self.scale:.3f} is smaller "
                            f"than one {p}x{p} patch; raise imsize or leave out multiscale")
        return x[:, :h, :w].contiguous()

    def fingerprint(self) -> str:
        return fingerprint({"kind": "retrieval_thumbnail", **asdict(self)})


@dataclass(frozen=True)
class SquareBicubic:
    """eval_copy_detection.py's preprocessing: Resize((imsize, imsize), interpolation=3)
    (bicubic), ToTensor, ImageNet normalisation."""

    imsize: int = 224
    patch_size: int = 16
    mean: tuple = IMAGENET_MEAN
    std: tuple = IMAGENET_STD
    fixed_size = True

    def __call__(self, img: Image.Image) -> torch.Tensor:
        img = TF.resize(img, [self.imsize, self.imsize], interpolation=interpolation_mode("bicubic"))
        x = TF.normalize(TF.pil_to_tensor(img).float().div_(255.0), self.mean, self.std)
        n = self.imsize // self.patch_size * self.patch_size
        return x[:, :n, :n].contiguous()

    def fingerprint(self) -> str:
        return fingerprint({"kind": "copydays_square", **asdict(self)})


def combine_scales(per_scale: list[np.ndarray]) -> np.ndarray:
    """multi_scale's mean over the scales, L2-normalised per image (the script's later
    normalisation makes its own division by 3 and by the norm immaterial)."""
    return l2n(np.sum(np.stack(per_scale), axis=0))


def l2n(x: np.ndarray) -> np.ndarray:
    """torch.nn.functional.normalize(p=2, dim=1): rows divided by max(norm, 1e-12)."""
    x = np.asarray(x, dtype=np.float32)
    return x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)


def gem(patches: np.ndarray, p: float = 4.0, eps: float = 1e-6) -> np.ndarray:
    """GeM over an (h, w, d) token grid: mean of clamp(x, eps)^p, to the power 1/p."""
    x = torch.as_tensor(np.array(patches, dtype=np.float32)).clamp(min=eps)
    return x.pow(p).mean(dim=(0, 1)).pow(1.0 / p).numpy()


@dataclass
class Whitening:
    """utils.PCA as eval_copy_detection.py uses it: the whitening set's mean is subtracted,
    but the covariance is of the uncentred features (the script's order); eigenvalues under
    1e-5 of the largest are raised to it; every dimension kept, scaled by eigenvalue^-0.5."""

    mean: np.ndarray
    dvt: np.ndarray  # (d, d)

    @classmethod
    def learn(cls, feats: np.ndarray, whit: float = 0.5) -> "Whitening":
        f = torch.as_tensor(np.asarray(feats, dtype=np.float32))
        cov = (f.T @ f / f.shape[0]).numpy()
        d, v = np.linalg.eigh(cov)
        eps = d.max() * 1e-5
        d[d < eps] = eps
        idx = np.argsort(d)[::-1]
        d, v = d[idx], v[:, idx]
        return cls(mean=f.mean(dim=0).numpy(), dvt=np.diag(1.0 / d ** whit) @ v.T)

    def apply(self, x: np.ndarray) -> np.ndarray:
        x = torch.as_tensor(np.asarray(x, dtype=np.float32)) - torch.as_tensor(self.mean)
        return (torch.as_tensor(self.dvt, dtype=torch.float32) @ x.T).T.numpy()
