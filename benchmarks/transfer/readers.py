"""Readers of the transfer data sets in their published layouts: torchvision's folder layouts (its
dataset classes document them; read here by this project's code, nothing downloaded) and, where
SynCLR wrote its own dataset class (SUN397, Caltech-101, VOC2007: SynCLR/eval/downstreams/), that
class's layout. Each reader states the official split plan and metric (benchmarks.transfer.layout)."""
from __future__ import annotations

import csv
import json
import os
from pathlib import Path

import numpy as np

from harness.data.io import is_image_file
from harness.errors import DataError
from harness.registry import register_dataset

from benchmarks.transfer.layout import TransferImages

VOC_CLASSES = ("aeroplane", "bicycle", "bird", "boat", "bottle", "bus", "car", "cat", "chair", "cow",
               "diningtable", "dog", "horse", "motorbike", "person", "pottedplant", "sheep", "sofa", "train",
               "tvmonitor")


def _folder_classes(split_dir: Path, extensions=None) -> tuple[list[str], list[Path], list[int]]:
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


@register_dataset("dtd")
class DTD(TransferImages):
    name, METRIC, VAL_SPLIT, SPLITS = "dtd", "top1", "val", ("train", "val", "test")
    LAYOUT = "<root>/dtd/dtd/labels/{train,val,test}1.txt and <root>/dtd/dtd/images/<class>/<file> (torchvision DTD)"
    partition = 1

    def read(self):
        data = self.root / "dtd" / "dtd"
        rel = self.lines(data / "labels" / f"{self.split}{self.partition}.txt")
        names = [r.strip().split("/")[0] for r in rel]
        classes = sorted(set(names))
        return classes, [data / "images" / r.strip() for r in rel], [classes.index(n) for n in names]


@register_dataset("pets")
class OxfordPets(TransferImages):
    name, METRIC, BASE_SPLIT, SPLITS = "pets", "mean_per_class", "trainval", ("trainval", "test")
    LAYOUT = ("<root>/oxford-iiit-pet/annotations/{trainval,test}.txt and <root>/oxford-iiit-pet/images/<id>.jpg "
              "(torchvision OxfordIIITPet)")

    def read(self):
        base = self.root / "oxford-iiit-pet"
        ids, labels = [], []
        for line in self.lines(base / "annotations" / f"{self.split}.txt"):
            image_id, class_id = line.split()[:2]
            ids.append(image_id)
            labels.append(int(class_id) - 1)
        breeds = dict(sorted({(lab, i.rsplit("_", 1)[0]) for i, lab in zip(ids, labels)}))
        classes = [" ".join(p.title() for p in breeds.get(k, f"class_{k}").split("_")) for k in range(max(labels) + 1)]
        return classes, [base / "images" / f"{i}.jpg" for i in ids], labels


@register_dataset("flowers")
class Flowers102(TransferImages):
    name, METRIC, VAL_SPLIT, SPLITS = "flowers", "mean_per_class", "val", ("train", "val", "test")
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


@register_dataset("aircraft")
class FGVCAircraft(TransferImages):
    name, METRIC, VAL_SPLIT, SPLITS = "aircraft", "mean_per_class", "val", ("train", "val", "trainval", "test")
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


@register_dataset("food")
class Food101(TransferImages):
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


@register_dataset("sun397")
class SUN397(TransferImages):
    """SynCLR's downstreams/sun397.py: split 01; a file's class is the first class (sorted) whose
    "/<name>/" occurs in its path."""

    name = "sun397"
    LAYOUT = "<root>/{ClassName.txt,Training_01.txt,Testing_01.txt} and <root>/<x>/<class>/<file> (SynCLR SUN397)"

    def read(self):
        classes = sorted(line[3:] for line in self.lines(self.root / "ClassName.txt"))
        listing = self.root / ("Training_01.txt" if self.split == "train" else "Testing_01.txt")
        paths, labels = [], []
        for line in self.lines(listing):
            path = self.root / line.strip()[1:]
            found = next((k for k, c in enumerate(classes) if f"/{c}/" in path.as_posix()), None)
            if found is None:
                raise DataError(f"{self.name}: {line.strip()} in {listing} names no class of ClassName.txt")
            paths.append(path)
            labels.append(found)
        return classes, paths, labels


@register_dataset("caltech101")
class Caltech101(TransferImages):
    """SynCLR's downstreams/caltech101.py: train.txt / test.txt (``<class>/<file> <label>``), written
    by its ``create_caltech101_splits`` (30 draws per class with replacement, seed 0)."""

    name, METRIC = "caltech101", "mean_per_class"
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


@register_dataset("voc2007")
class VOC2007(TransferImages):
    """SynCLR's downstreams/voc2007.py: per image the 20 labels of ImageSets/Main/<class>_<split>.txt;
    a label of 1 is positive, -1 (absent) and 0 (difficult) both negative, as its ``target == 1``."""

    name, METRIC, VAL_SPLIT, SPLITS = "voc2007", "mAP", "val", ("train", "val", "trainval", "test")
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


class _ImageFolderSplits(TransferImages):
    """``<root>/<split>/<class>/<image>``: torchvision ImageFolder on ``root/split``, as SynCLR reads
    EuroSAT, RESISC45 and KITTI distance."""

    LAYOUT = "<root>/{train,test}/<class>/<image> (ImageFolder per split)"
    folder = ""

    def read(self):
        split_dir = self.root / self.folder / self.split
        if not split_dir.is_dir():
            raise DataError(f"{self.name}: split folder {split_dir} not found; expected {self.LAYOUT}")
        return _folder_classes(split_dir)


@register_dataset("eurosat")
class EuroSAT(_ImageFolderSplits):
    name = "eurosat"


@register_dataset("resisc45")
class RESISC45(_ImageFolderSplits):
    name = "resisc45"


@register_dataset("kitti_distance")
class KittiDistance(_ImageFolderSplits):
    name = "kitti_distance"


@register_dataset("country211")
class Country211(_ImageFolderSplits):
    name, VAL_SPLIT, SPLITS, folder = "country211", "valid", ("train", "valid", "test"), "country211"
    LAYOUT = "<root>/country211/{train,valid,test}/<country code>/<image> (torchvision Country211)"


@register_dataset("gtsrb")
class GTSRB(TransferImages):
    name = "gtsrb"
    LAYOUT = ("<root>/gtsrb/GTSRB/Training/<class>/*.ppm, <root>/gtsrb/GTSRB/Final_Test/Images/*.ppm and "
              "<root>/gtsrb/GT-final_test.csv (torchvision GTSRB)")

    def read(self):
        base = self.root / "gtsrb"
        if self.split == "train":
            train = base / "GTSRB" / "Training"
            if not train.is_dir():
                raise DataError(f"{self.name}: {train} not found; expected {self.LAYOUT}")
            return _folder_classes(train, extensions=(".ppm",))
        with open(self.require(base / "GT-final_test.csv")) as f:
            rows = list(csv.DictReader(f, delimiter=";", skipinitialspace=True))
        labels = [int(r["ClassId"]) for r in rows]
        classes = [f"{k:05d}" for k in range(max(labels) + 1)]
        return classes, [base / "GTSRB" / "Final_Test" / "Images" / r["Filename"] for r in rows], labels


@register_dataset("cars")
class StanfordCars(TransferImages):
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


def _read_idx(path: Path) -> np.ndarray:
    """An (uncompressed) idx file of unsigned bytes: magic 0x0000 08 <ndim>, big-endian sizes."""
    data = path.read_bytes()
    if len(data) < 4 or data[:3] != b"\x00\x00\x08":
        raise DataError(f"mnist: {path} is no idx file of unsigned bytes (magic {data[:4].hex()})")
    ndim = data[3]
    shape = tuple(int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(ndim))
    body = np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim)
    if body.size != int(np.prod(shape)):
        raise DataError(f"mnist: {path} holds {body.size} bytes for shape {shape}; the file is truncated")
    return body.reshape(shape)


@register_dataset("mnist")
class MNIST(TransferImages):
    """Images held in idx files, not one file each: ``image_paths`` are the idx file repeated (for the
    content stamp), ``load_image`` the i-th digit as RGB (SynCLR's transform converts to RGB)."""

    name = "mnist"
    LAYOUT = "<root>/MNIST/raw/{train,t10k}-{images-idx3,labels-idx1}-ubyte (torchvision MNIST, unpacked)"

    def read(self):
        prefix = "train" if self.split == "train" else "t10k"
        raw = self.root / "MNIST" / "raw"
        images_file = self.require(raw / f"{prefix}-images-idx3-ubyte")
        self.pixels = _read_idx(images_file)
        labels = _read_idx(self.require(raw / f"{prefix}-labels-idx1-ubyte")).astype(np.int64)
        if len(labels) != len(self.pixels) or self.pixels.ndim != 3:
            raise DataError(f"mnist: {images_file} holds {self.pixels.shape} images for {len(labels)} labels")
        self.stems = [f"{prefix}/{i}" for i in range(len(labels))]
        return [str(k) for k in range(10)], [images_file] * len(labels), labels.tolist()

    def load_image(self, i: int):
        from PIL import Image

        return Image.fromarray(np.ascontiguousarray(self.pixels[i])).convert("RGB")  # uint8 (28, 28): mode L

    def content_stamp(self) -> str:
        from harness.data.io import files_stamp

        return files_stamp(sorted(set(self.image_paths)))

    def fingerprint(self) -> str:
        from harness.config import fingerprint as _fingerprint

        return _fingerprint({"dataset": self.name, "split": self.split, "images": self.image_paths[0].name,
                             "n": len(self.targets), "labels": self.targets})
