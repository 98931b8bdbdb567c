"""FGVC-Aircraft 2013b (data set key ``aircraft``) in torchvision's FGVCAircraft layout, variant level."""
from __future__ import annotations

from harness.data.official_split import OfficialSplit
from harness.errors import DataError
from harness.registry import register_dataset


@register_dataset("aircraft")
class FGVCAircraft(OfficialSplit):
    name, SPLITS = "aircraft", ("train", "val", "trainval", "test")
    LAYOUT = ("<root>/fgvc-aircraft-2013b/data/{variants.txt,images_variant_<split>.txt,images/<id>.jpg} "
              "(torchvision FGVCAircraft, annotation level variant)")

    def read(self):
        data = self.root / "fgvc-aircraft-2013b" / "data"
        classes = [c.strip() for c in self.lines(data / "variants.txt")]
        index = {c: k for k, c in enumerate(classes)}
        paths, labels = [], []
        for line in self.lines(data / f"images_variant_{self.split}.txt"):
            image_id, variant = line.strip().split(" ", 1)
            if variant not in index:
                raise DataError(f"{self.name}: variant {variant!r} of image {image_id} is not in "
                                f"{data / 'variants.txt'}")
            paths.append(data / "images" / f"{image_id}.jpg")
            labels.append(index[variant])
        return classes, paths, labels
