"""The shifted sets' evaluation transforms that the shared ones do not cover."""
from __future__ import annotations

from dataclasses import asdict, dataclass

import torch
from PIL import Image

from harness.config import fingerprint
from harness.data.transforms import IMAGENET_MEAN, IMAGENET_STD, TF


@dataclass(frozen=True)
class CenterCropOnly:
    """CenterCrop(crop) -> ToTensor -> normalise, no resize (ImageNet-C's test.py: its images are
    224 x 224 already); ``crop`` 0: the image as it is (the backgrounds challenge's ToTensor)."""

    crop: int = 224
    mean: tuple = IMAGENET_MEAN
    std: tuple = IMAGENET_STD

    def __call__(self, img: Image.Image) -> torch.Tensor:
        if self.crop:
            img = TF.center_crop(img, [self.crop, self.crop])
        return TF.normalize(TF.pil_to_tensor(img).float().div_(255.0), self.mean, self.std)

    def fingerprint(self) -> str:
        return fingerprint({"kind": "center_crop_only", **asdict(self)})
