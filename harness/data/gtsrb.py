"""The German Traffic Sign Recognition Benchmark (data set key ``gtsrb``) in torchvision's GTSRB layout."""
from __future__ import annotations

import csv

from harness.data.folder_splits import folder_classes
from harness.data.official_split import OfficialSplit
from harness.errors import DataError
from harness.registry import register_dataset


@register_dataset("gtsrb")
class GTSRB(OfficialSplit):
    name = "gtsrb"
    LAYOUT = ("<root>/gtsrb/GTSRB/Training/<class>/*.ppm, <root>/gtsrb/GTSRB/Final_Test/Images/*.ppm and "
              "<root>/gtsrb/GT-final_test.csv (torchvision GTSRB)")

    def read(self):
        base = self.root / "gtsrb"
        if self.split == "train":
            train = base / "GTSRB" / "Training"
            if not train.is_dir():
                raise DataError(f"{self.name}: {train} not found; expected {self.LAYOUT}")
            return folder_classes(train, extensions=(".ppm",))
        with open(self.require(base / "GT-final_test.csv")) as f:
            rows = list(csv.DictReader(f, delimiter=";", skipinitialspace=True))
        labels = [int(r["ClassId"]) for r in rows]
        classes = [f"{k:05d}" for k in range(max(labels) + 1)]
        return classes, [base / "GTSRB" / "Final_Test" / "Images" / r["Filename"] for r in rows], labels
