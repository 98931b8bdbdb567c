"""MNIST (data set key ``mnist``) from torchvision's unpacked idx files."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from harness.data.official_split import OfficialSplit
from harness.errors import DataError
from harness.registry import register_dataset


def _read_idx(path: Path) -> np.ndarray:
    """An (uncompressed) idx file of unsigned bytes: magic 0x0000 08 <ndim>, big-endian sizes."""
    data = path.read_bytes()
    if len(data) < 4 or data[:3] != b"\x00\x00\x08":
        raise DataError(f"mnist: {path} is no idx file of unsigned bytes (magic {data[:4].hex()})")
    ndim = data[3]
    shape = tuple(int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(ndim))
    body = np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim)
    if body.size != int(np.prod(shape)):
        raise DataError(f"mnist: {path} holds {body.size} bytes for shape {shape}; the file is truncated")
    return body.reshape(shape)


@register_dataset("mnist")
class MNIST(OfficialSplit):
    """Images held in idx files, not one file each: ``image_paths`` are the idx file repeated (for the
    content stamp), ``load_image`` the i-th digit as RGB (SynCLR's transform converts to RGB)."""

    name = "mnist"
    LAYOUT = "<root>/MNIST/raw/{train,t10k}-{images-idx3,labels-idx1}-ubyte (torchvision MNIST, unpacked)"

    def read(self):
        prefix = "train" if self.split == "train" else "t10k"
        raw = self.root / "MNIST" / "raw"
        images_file = self.require(raw / f"{prefix}-images-idx3-ubyte")
        self.pixels = _read_idx(images_file)
        labels = _read_idx(self.require(raw / f"{prefix}-labels-idx1-ubyte")).astype(np.int64)
        if len(labels) != len(self.pixels) or self.pixels.ndim != 3:
            raise DataError(f"mnist: {images_file} holds {self.pixels.shape} images for {len(labels)} labels")
        self.stems = [f"{prefix}/{i}" for i in range(len(labels))]
        return [str(k) for k in range(10)], [images_file] * len(labels), labels.tolist()

    def load_image(self, i: int):
        from PIL import Image

        return Image.fromarray(np.ascontiguousarray(self.pixels[i])).convert("RGB")  # uint8 (28, 28): mode L

    def content_stamp(self) -> str:
        from harness.data.io import files_stamp

        return files_stamp(sorted(set(self.image_paths)))

    def fingerprint(self) -> str:
        from harness.config import fingerprint as _fingerprint

        return _fingerprint({"dataset": self.name, "split": self.split, "images": self.image_paths[0].name,
                             "n": len(self.targets), "labels": self.targets})
