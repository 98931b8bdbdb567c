"""Tiny data sets in the official file formats of CIFAR-10/100 (python pickles with the official
keys), iNaturalist 2018/2019 (train/val JSON with the official keys, the released categories.json,
the archive's folder layout), Flowers-102 (imagelabels.mat, setid.mat, jpg/) and Stanford Cars'
all-images release (cars_annos.mat, car_ims/), for the reader tests. Each writer takes a folder and
returns it; everything is drawn from a seeded generator."""
from __future__ import annotations

import json
import pickle
from pathlib import Path

import numpy as np
from PIL import Image


def _image(path: Path, rng: np.random.Generator, size: int = 8) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(rng.integers(0, 256, (size, size, 3), dtype=np.uint8)).save(path)


def _pickle(path: Path, obj) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as f:
        pickle.dump(obj, f, protocol=2)  # the Python 2 era protocol of the official files


def write_cifar10(root: Path, per_batch: int = 3, seed: int = 0) -> Path:
    rng = np.random.default_rng(seed)
    base = root / "cifar-10-batches-py"
    names = ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"]
    _pickle(base / "batches.meta", {"num_cases_per_batch": per_batch, "label_names": names, "num_vis": 3072})
    for i, fname in enumerate([f"data_batch_{k}" for k in range(1, 6)] + ["test_batch"]):
        labels = [int(x) for x in rng.integers(0, 10, per_batch)]
        _pickle(base / fname, {"batch_label": f"batch {i}", "labels": labels,
                               "data": rng.integers(0, 256, (per_batch, 3072), dtype=np.uint8),
                               "filenames": [f"img_{i}_{j}.png" for j in range(per_batch)]})
    return root


def write_cifar100(root: Path, n: int = 4, seed: int = 0) -> Path:
    rng = np.random.default_rng(seed)
    base = root / "cifar-100-python"
    _pickle(base / "meta", {"fine_label_names": [f"fine{k}" for k in range(100)],
                            "coarse_label_names": [f"coarse{k}" for k in range(20)]})
    for fname in ("train", "test"):
        fine = [int(x) for x in rng.integers(0, 100, n)]
        _pickle(base / fname, {"filenames": [f"{fname}_{j}.png" for j in range(n)], "batch_label": fname,
                               "fine_labels": fine, "coarse_labels": [f // 5 for f in fine],
                               "data": rng.integers(0, 256, (n, 3072), dtype=np.uint8)})
    return root


INAT_CATEGORIES = [  # position = id, as the released categories.json
    {"id": 0, "name": "Aus bus", "supercategory": "Plantae", "kingdom": "Plantae", "phylum": "P1",
     "class": "C1", "order": "O1", "family": "F1", "genus": "Aus"},
    {"id": 1, "name": "Aus cus", "supercategory": "Plantae", "kingdom": "Plantae", "phylum": "P1",
     "class": "C1", "order": "O1", "family": "F1", "genus": "Aus"},
    {"id": 2, "name": "Dus eus", "supercategory": "Insecta", "kingdom": "Animalia", "phylum": "P2",
     "class": "C2", "order": "O2", "family": "F2", "genus": "Dus"},
]
# (image id, category id) per split; train's first appearances are 2, 0, 1 (classes in that order)
INAT_SPLITS = {"train": [(10, 2), (11, 0), (12, 2), (13, 1)], "val": [(20, 1), (21, 2), (22, 0)]}


def write_inat(root: Path, year: int, seed: int = 0) -> Path:
    rng = np.random.default_rng(seed)
    root.mkdir(parents=True, exist_ok=True)
    (root / "categories.json").write_text(json.dumps(INAT_CATEGORIES))
    for split, items in INAT_SPLITS.items():
        images, annotations = [], []
        for image_id, cat in items:
            sup = INAT_CATEGORIES[cat]["supercategory"]
            fname = f"train_val{year}/{sup}/{cat}/{image_id:04d}abcd.jpg"
            _image(root / fname, rng)
            images.append({"id": image_id, "width": 8, "height": 8, "file_name": fname, "license": 1,
                           "rights_holder": "x"})
            annotations.append({"id": 1000 + image_id, "image_id": image_id, "category_id": cat})
        obfuscated = [{"id": c["id"], "name": str(c["id"]), "supercategory": c["supercategory"]}
                      for c in INAT_CATEGORIES]
        doc = {"info": {"year": year}, "images": images, "annotations": annotations,
               "categories": obfuscated, "licenses": []}
        (root / f"{split}{year}.json").write_text(json.dumps(doc))
    return root


# Flowers: 10 images, labels 1..3; trnid/valid/tstid as setid.mat holds them (1-based image ids)
FLOWERS_LABELS = [1, 2, 3, 1, 2, 3, 1, 2, 3, 3]
FLOWERS_SETID = {"trnid": [1, 2, 3], "valid": [4, 5, 6], "tstid": [7, 8, 9, 10]}


def write_flowers(root: Path, seed: int = 0) -> Path:
    from scipy.io import savemat

    rng = np.random.default_rng(seed)
    for k in range(1, len(FLOWERS_LABELS) + 1):
        _image(root / "jpg" / f"image_{k:05d}.jpg", rng)
    savemat(root / "imagelabels.mat", {"labels": np.array([FLOWERS_LABELS], dtype=np.uint8)})
    savemat(root / "setid.mat", {k: np.array([v], dtype=np.uint16) for k, v in FLOWERS_SETID.items()})
    return root


# Cars: (class 1-based, test flag, bbox_y2) per image, 4 classes
CARS_RECORDS = [(1, 0, 100), (2, 0, 120), (3, 0, 100), (4, 0, 130), (2, 1, 90), (4, 1, 99), (1, 1, 50)]


def write_cars(root: Path, seed: int = 0) -> Path:
    from scipy.io import savemat

    rng = np.random.default_rng(seed)
    fields = [("relative_im_path", object), ("bbox_x1", object), ("bbox_y1", object), ("bbox_x2", object),
              ("bbox_y2", object), ("class", object), ("test", object)]
    records = np.zeros((1, len(CARS_RECORDS)), dtype=fields)
    for i, (cls, test, y2) in enumerate(CARS_RECORDS):
        rel = f"car_ims/{i + 1:06d}.jpg"
        _image(root / rel, rng)
        records[0, i] = (rel, np.uint8(1), np.uint8(2), np.uint16(60), np.uint16(y2), np.uint8(cls), np.uint8(test))
    names = np.empty((1, 4), dtype=object)
    for k in range(4):
        names[0, k] = f"Make Model {k + 1}"
    savemat(root / "cars_annos.mat", {"annotations": records, "class_names": names})
    return root
