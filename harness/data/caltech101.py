"""Caltech-101 (data set key ``caltech101``) with the train / test lists SynCLR's downstreams/caltech101.py reads."""
from __future__ import annotations

from harness.data.official_split import OfficialSplit
from harness.registry import register_dataset


@register_dataset("caltech101")
class Caltech101(OfficialSplit):
    """SynCLR's downstreams/caltech101.py: train.txt / test.txt (``<class>/<file> <label>``), written
    by its ``create_caltech101_splits`` (30 draws per class with replacement, seed 0)."""

    name = "caltech101"
    LAYOUT = ("<root>/{train,test}.txt (SynCLR create_caltech101_splits) and "
              "<root>/caltech101/101_ObjectCategories/<class>/<file>")

    def read(self):
        images = self.root / "caltech101" / "101_ObjectCategories"
        paths, labels, names = [], [], {}
        for line in self.lines(self.root / f"{self.split}.txt"):
            rel, label = line.split(" ")[:2]
            paths.append(images / rel)
            labels.append(int(label))
            names[int(label)] = rel.split("/")[0]
        classes = [names.get(k, f"class_{k}") for k in range(max(labels) + 1)]
        return classes, paths, labels
