"""Describable Textures (data set key ``dtd``) in torchvision's DTD layout, partition 1."""
from __future__ import annotations

from harness.data.official_split import OfficialSplit
from harness.registry import register_dataset


@register_dataset("dtd")
class DTD(OfficialSplit):
    name, SPLITS = "dtd", ("train", "val", "test")
    LAYOUT = "<root>/dtd/dtd/labels/{train,val,test}1.txt and <root>/dtd/dtd/images/<class>/<file> (torchvision DTD)"
    partition = 1

    def read(self):
        data = self.root / "dtd" / "dtd"
        rel = self.lines(data / "labels" / f"{self.split}{self.partition}.txt")
        names = [r.strip().split("/")[0] for r in rel]
        classes = sorted(set(names))
        return classes, [data / "images" / r.strip() for r in rel], [classes.index(n) for n in names]
