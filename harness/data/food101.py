"""Food-101 (data set key ``food``) in torchvision's Food101 layout."""
from __future__ import annotations

import json

from harness.data.official_split import OfficialSplit
from harness.registry import register_dataset


@register_dataset("food")
class Food101(OfficialSplit):
    name = "food"
    LAYOUT = "<root>/food-101/meta/{train,test}.json and <root>/food-101/images/<class>/<id>.jpg (torchvision Food101)"

    def read(self):
        base = self.root / "food-101"
        meta = json.loads(self.require(base / "meta" / f"{self.split}.json").read_text())
        classes = sorted(meta)
        paths, labels = [], []
        for k, cls in enumerate(classes):
            paths += [base / "images" / f"{rel}.jpg" for rel in meta[cls]]
            labels += [k] * len(meta[cls])
        return classes, paths, labels
