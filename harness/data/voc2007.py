"""Pascal VOC 2007's image-level labels (data set key ``voc2007``, layout ``classification``) as
SynCLR's downstreams/voc2007.py reads them: a multi-label set (``label_matrix``)."""
from __future__ import annotations

import numpy as np

from harness.data.official_split import OfficialSplit
from harness.data.segmentation import VOC_CLASSES as _SEG
from harness.errors import DataError
from harness.registry import register_dataset

VOC_CLASSES = _SEG[1:]  # the 20 object classes, background left out


@register_dataset("voc2007")
class VOC2007(OfficialSplit):
    """SynCLR's downstreams/voc2007.py: per image the 20 labels of ImageSets/Main/<class>_<split>.txt;
    a label of 1 is positive, -1 (absent) and 0 (difficult) both negative, as its ``target == 1``."""

    name, SPLITS = "voc2007", ("train", "val", "trainval", "test")
    LAYOUT = "<root>/VOCdevkit/VOC2007/{ImageSets/Main/<class>_<split>.txt,JPEGImages/<id>.jpg} (SynCLR VOC2007)"

    def read(self):
        voc = self.root / "VOCdevkit" / "VOC2007"
        table: dict[str, np.ndarray] = {}
        for k, cls in enumerate(VOC_CLASSES):
            for line in self.lines(voc / "ImageSets" / "Main" / f"{cls}_{self.split}.txt"):
                parts = line.split(" ")
                if parts[0] not in table:
                    if k:
                        raise DataError(f"{self.name}: image {parts[0]} of {cls}_{self.split}.txt is not in "
                                        f"{VOC_CLASSES[0]}_{self.split}.txt")
                    table[parts[0]] = np.zeros(len(VOC_CLASSES), dtype=np.int64)
                table[parts[0]][k] = int(parts[-1])
        self.raw_labels = np.stack(list(table.values()))
        self.label_matrix = (self.raw_labels == 1).astype(np.int64)
        return list(VOC_CLASSES), [voc / "JPEGImages" / f"{i}.jpg" for i in table], []
