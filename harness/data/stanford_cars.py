"""Stanford Cars (data set key ``cars``): the devkit release in torchvision's layout (reader ``cars``),
and the layout iBOT's Table 7 fine-tunes on (bytedance/ibot @ da316d8,
``evaluation/eval_cls.py`` ``CarsDataset``): the release of all 16,185 images in one folder with one
annotation file, ``<root>/car_ims/NNNNNN.jpg`` and ``<root>/cars_annos.mat`` (struct array
``annotations`` with ``relative_im_path``, ``bbox_x1..bbox_y2``, ``class`` (1-based), ``test`` (0/1),
and ``class_names``). ``test == 0`` is the training split (8,144 images), ``test == 1`` the test split
(8,041): the published split, the same images as the devkit layout (``cars_train/``, ``cars_test/``)
that the ``cars`` reader reads.

Labels here are ``class - 1`` over the 196 classes. The official class differs in two ways, kept as
data for a protocol that reproduces it (``official_label_offset``, ``official_num_outputs``): it keeps
the 1-based ``class`` as the label, and it sizes the classifier by the number of distinct values of the
record's fifth field, which is ``bbox_y2``, not ``class`` (``elem[4]``), over the training records."""
from __future__ import annotations

import numpy as np

from harness.data.official_split import OfficialSplit
from harness.errors import DataError
from harness.registry import register_dataset

_FIELDS = ("relative_im_path", "bbox_y2", "class", "test")


@register_dataset("cars_annos")
class StanfordCarsAnnos(OfficialSplit):
    name = "cars_annos"
    LAYOUT = ("<root>/{cars_annos.mat, car_ims/NNNNNN.jpg} (the all-images release of Stanford Cars, as "
              "iBOT's CarsDataset reads it)")
    official_label_offset = 1  # eval_cls.py trains on the 1-based `class`

    def read(self):
        from scipy.io import loadmat

        mat = loadmat(self.require(self.root / "cars_annos.mat"))
        if "annotations" not in mat or "class_names" not in mat:
            raise DataError(f"{self.name}: {self.root / 'cars_annos.mat'} has no 'annotations' / 'class_names' "
                            f"(keys {sorted(k for k in mat if not k.startswith('__'))}); expected {self.LAYOUT}")
        records = np.atleast_1d(mat["annotations"].squeeze())
        names = records.dtype.names or ()
        missing = [f for f in _FIELDS if f not in names]
        if missing:
            raise DataError(f"{self.name}: cars_annos.mat annotations lack field(s) {missing} (have {list(names)}); "
                            f"expected {self.LAYOUT}")
        classes = [str(np.asarray(c).squeeze()) for c in np.atleast_1d(mat["class_names"].squeeze())]
        test = np.array([int(np.asarray(r["test"]).squeeze()) for r in records])
        train_y2 = {int(np.asarray(r["bbox_y2"]).squeeze()) for r, t in zip(records, test) if t == 0}
        # the official head size: distinct fifth-field (bbox_y2) values of the training records
        self.official_num_outputs = len(train_y2)
        keep = [r for r, t in zip(records, test) if t == (1 if self.split == "test" else 0)]
        paths = [self.root / str(np.asarray(r["relative_im_path"]).squeeze()) for r in keep]
        labels = [int(np.asarray(r["class"]).squeeze()) - 1 for r in keep]
        return classes, paths, labels


@register_dataset("cars")
class StanfordCars(OfficialSplit):
    name = "cars"
    LAYOUT = ("<root>/stanford_cars/{cars_train,cars_test}/<file>, devkit/{cars_meta.mat,cars_train_annos.mat} and "
              "cars_test_annos_withlabels.mat (torchvision StanfordCars)")

    def read(self):
        from scipy.io import loadmat

        base = self.root / "stanford_cars"
        annos = (base / "devkit" / "cars_train_annos.mat" if self.split == "train"
                 else base / "cars_test_annos_withlabels.mat")
        rows = np.atleast_1d(loadmat(self.require(annos), squeeze_me=True)["annotations"])
        classes = [str(c) for c in loadmat(self.require(base / "devkit" / "cars_meta.mat"),
                                           squeeze_me=True)["class_names"].tolist()]
        folder = base / f"cars_{self.split}"
        return classes, [folder / str(r["fname"]) for r in rows], [int(r["class"]) - 1 for r in rows]
