"""Oxford Flowers-102 (data set key ``flowers``): its three published splits in torchvision's layout
(reader ``flowers``), and the split as iBOT's Table 7 fine-tunes on it (bytedance/ibot @ da316d8,
``evaluation/eval_cls.py`` ``FlwrsDataset``): training on ``trnid`` + ``valid`` of ``setid.mat``
(2,040 images, in that order), testing on ``tstid`` (6,149); labels ``imagelabels.mat`` - 1.

The files are the official release (``102flowers.tgz``'s ``jpg/``, ``imagelabels.mat``, ``setid.mat``);
the same files as the ``flowers`` reader reads, which serves the three published splits separately
(SynCLR's linear recipe picks C on ``val``): ``flowers102``'s ``trainval`` is their union.
The official class names an image by position in the sorted listing of ``jpg/`` (image id k is the k-th
file): with the complete folder that is ``image_{k:05d}.jpg``; a folder with other files would shift every
label, so it is refused here. The root is the folder holding ``jpg/`` (iBOT's ``data/flwrs``) or one
holding ``flowers-102/`` (torchvision's layout)."""
from __future__ import annotations

import os

import numpy as np

from harness.data.official_split import OfficialSplit
from harness.errors import DataError
from harness.registry import register_dataset

_SETID = {"trainval": ("trnid", "valid"), "test": ("tstid",), "train": ("trnid",), "val": ("valid",)}


@register_dataset("flowers102")
class Flowers102TrainVal(OfficialSplit):
    name = "flowers102"
    SPLITS = ("trainval", "test", "train", "val")
    LAYOUT = ("<root>/{jpg/image_NNNNN.jpg, imagelabels.mat, setid.mat} (the official release; or "
              "<root>/flowers-102/ holding them, torchvision's layout)")

    def read(self):
        from scipy.io import loadmat

        base = self.root if (self.root / "jpg").is_dir() or not (self.root / "flowers-102").is_dir() \
            else self.root / "flowers-102"
        labels = np.atleast_1d(loadmat(self.require(base / "imagelabels.mat"), squeeze_me=True)["labels"])
        setid = loadmat(self.require(base / "setid.mat"), squeeze_me=True)
        missing = [k for k in _SETID[self.split] if k not in setid]
        if missing:
            raise DataError(f"{self.name}: {base / 'setid.mat'} has no {missing}; expected {self.LAYOUT}")
        ids = np.concatenate([np.atleast_1d(setid[k]) for k in _SETID[self.split]]).astype(np.int64)
        jpg = base / "jpg"
        if not jpg.is_dir():
            raise DataError(f"{self.name}: {jpg} not found; expected {self.LAYOUT}")
        listing = sorted(os.listdir(jpg))
        if len(listing) != len(labels):
            raise DataError(f"{self.name}: {jpg} holds {len(listing)} files for the {len(labels)} labels of "
                            f"imagelabels.mat; the official reader takes image k as the k-th file, so the "
                            f"folder must hold exactly the release's images")
        if ids.min() < 1 or ids.max() > len(labels):
            raise DataError(f"{self.name}: setid.mat names image id {ids.min() if ids.min() < 1 else ids.max()}, "
                            f"out of range for the {len(labels)} images of imagelabels.mat")
        num_classes = int(labels.max())
        targets = [int(labels[i - 1]) - 1 for i in ids]
        return [str(k) for k in range(num_classes)], [jpg / listing[i - 1] for i in ids], targets


@register_dataset("flowers")
class Flowers102(OfficialSplit):
    name, SPLITS = "flowers", ("train", "val", "test")
    LAYOUT = ("<root>/flowers-102/{imagelabels.mat,setid.mat} and <root>/flowers-102/jpg/image_NNNNN.jpg "
              "(torchvision Flowers102)")
    _SETID = {"train": "trnid", "val": "valid", "test": "tstid"}

    def read(self):
        from scipy.io import loadmat

        base = self.root / "flowers-102"
        setid = loadmat(self.require(base / "setid.mat"), squeeze_me=True)
        ids = np.atleast_1d(setid[self._SETID[self.split]]).tolist()
        all_labels = loadmat(self.require(base / "imagelabels.mat"), squeeze_me=True)["labels"]
        labels = [int(all_labels[i - 1]) - 1 for i in ids]
        classes = [str(k) for k in range(int(np.max(all_labels)))]
        return classes, [base / "jpg" / f"image_{i:05d}.jpg" for i in ids], labels
