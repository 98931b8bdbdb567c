"""Data sets released (or split by SynCLR's scripts) as one ImageFolder per split: EuroSAT,
NWPU-RESISC45, KITTI distance (keys ``eurosat``, ``resisc45``, ``kitti:distance``) and Country211."""
from __future__ import annotations

import os
from pathlib import Path

from harness.data.io import is_image_file
from harness.data.official_split import OfficialSplit
from harness.errors import DataError
from harness.registry import register_dataset


def folder_classes(split_dir: Path, extensions=None) -> tuple[list[str], list[Path], list[int]]:
    """ImageFolder order: classes sorted by folder name, files sorted, recursively."""
    classes = sorted(e.name for e in os.scandir(split_dir) if e.is_dir())
    paths, labels = [], []
    for k, cls in enumerate(classes):
        for dirpath, _, files in sorted(os.walk(split_dir / cls, followlinks=True)):
            for f in sorted(files):
                if (f.lower().endswith(extensions) if extensions else is_image_file(f)):
                    paths.append(Path(dirpath) / f)
                    labels.append(k)
    return classes, paths, labels


class ImageFolderSplits(OfficialSplit):
    """``<root>/<split>/<class>/<image>``: torchvision ImageFolder on ``root/split``, as SynCLR reads
    EuroSAT, RESISC45 and KITTI distance. EuroSAT and RESISC45 are released as one folder per class and
    no SynCLR source states how they were split: the split folders come with the data (no prepare)."""

    LAYOUT = "<root>/{train,test}/<class>/<image> (ImageFolder per split)"
    folder = ""

    def read(self):
        split_dir = self.root / self.folder / self.split
        if not split_dir.is_dir():
            raise DataError(f"{self.name}: split folder {split_dir} not found; expected {self.LAYOUT}")
        return folder_classes(split_dir)


@register_dataset("eurosat")
class EuroSAT(ImageFolderSplits):
    name = "eurosat"


@register_dataset("resisc45")
class RESISC45(ImageFolderSplits):
    name = "resisc45"


@register_dataset("kitti_distance")
class KittiDistance(ImageFolderSplits):
    name = "kitti_distance"


@register_dataset("country211")
class Country211(ImageFolderSplits):
    name, SPLITS, folder = "country211", ("train", "valid", "test"), "country211"
    LAYOUT = "<root>/country211/{train,valid,test}/<country code>/<image> (torchvision Country211)"
