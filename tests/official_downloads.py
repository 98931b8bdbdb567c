"""Tiny downloads in the official formats (the same archive members, .mat fields and list files as the
real ones, few and small images), for the `ssl-bench data prepare` tests. Every draw is seeded.

- ImageNet: ILSVRC2012_devkit_t12.tar.gz (ILSVRC2012_devkit_t12/data/meta.mat with the ``synsets``
  struct array: ILSVRC2012_ID, WNID, words, gloss, num_children, wordnet_height, num_train_images;
  data/ILSVRC2012_validation_ground_truth.txt, one ILSVRC2012_ID a line), ILSVRC2012_img_val.tar
  (ILSVRC2012_val_%08d.JPEG at the top level) and ILSVRC2012_img_train.tar (one <wnid>.tar per class).
- VOC 2012 + SBD: VOCdevkit/VOC2012/{JPEGImages,SegmentationClass,ImageSets/Segmentation/{train,val}.txt}
  and benchmark_RELEASE/dataset/{cls/<id>.mat (GTcls.Segmentation), train.txt, val.txt}.
"""
from __future__ import annotations

import io
import tarfile
from pathlib import Path

import numpy as np
from PIL import Image

SYNSET_FIELDS = ("ILSVRC2012_ID", "WNID", "words", "gloss", "num_children", "wordnet_height", "num_train_images")


def _jpeg(rng: np.random.Generator, size: tuple[int, int] = (24, 16)) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(rng.integers(0, 255, (size[1], size[0], 3), dtype=np.uint8)).save(buf, "JPEG", quality=90)
    return buf.getvalue()


def _add(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    tar.addfile(info, io.BytesIO(data))


def _meta_mat(path: Path, wnids: list[str]) -> None:
    from scipy.io import savemat

    # the leaf classes first (ids 1..n, as the real meta.mat), then one inner node with children
    rows = [(i + 1, w, f"class {i}", f"gloss {i}", 0, 0, 3) for i, w in enumerate(wnids)]
    rows.append((len(wnids) + 1, "n99999999", "an inner node", "not a class", len(wnids), 1, 0))
    synsets = np.zeros((len(rows), 1), dtype=[(f, "O") for f in SYNSET_FIELDS])
    for r, row in enumerate(rows):
        for f, value in zip(SYNSET_FIELDS, row):
            synsets[r, 0][f] = np.array([[value]]) if isinstance(value, int) else np.array([value])
    savemat(path, {"synsets": synsets})


def write_imagenet(download: Path, classes: int = 3, val_per_class: int = 2, train_per_class: int = 2,
                   seed: int = 0) -> list[str]:
    """The three archives under ``download``; returns the val images' wnids (image i+1 is wnids[i])."""
    rng = np.random.default_rng(seed)
    download.mkdir(parents=True, exist_ok=True)
    wnids = [f"n{1000000 + 17 * i:08d}" for i in range(classes)]
    labels = [int(x) for x in rng.permutation(np.repeat(np.arange(1, classes + 1), val_per_class))]
    staging = download / "_devkit"
    data = staging / "ILSVRC2012_devkit_t12" / "data"
    data.mkdir(parents=True)
    _meta_mat(data / "meta.mat", wnids)
    (data / "ILSVRC2012_validation_ground_truth.txt").write_text("".join(f"{x}\n" for x in labels))
    with tarfile.open(download / "ILSVRC2012_devkit_t12.tar.gz", "w:gz") as tar:
        tar.add(staging / "ILSVRC2012_devkit_t12", arcname="ILSVRC2012_devkit_t12")
    for p in sorted(staging.rglob("*"), reverse=True):
        p.unlink() if p.is_file() else p.rmdir()
    staging.rmdir()
    with tarfile.open(download / "ILSVRC2012_img_val.tar", "w") as tar:
        for i in range(len(labels)):
            _add(tar, f"ILSVRC2012_val_{i + 1:08d}.JPEG", _jpeg(rng))
    with tarfile.open(download / "ILSVRC2012_img_train.tar", "w") as tar:
        for w in wnids:
            inner = io.BytesIO()
            with tarfile.open(fileobj=inner, mode="w") as class_tar:
                for k in range(train_per_class):
                    _add(class_tar, f"{w}_{k + 1}.JPEG", _jpeg(rng))
            _add(tar, f"{w}.tar", inner.getvalue())
    return [wnids[x - 1] for x in labels]


def _png(mask: np.ndarray, palette: bool) -> bytes:
    buf = io.BytesIO()
    image = Image.fromarray(mask)
    if palette:
        image = image.convert("P")
        image.putpalette([v for i in range(256) for v in ((i * 37) % 256, (i * 91) % 256, (i * 53) % 256)])
    image.save(buf, "PNG")
    return buf.getvalue()


def _gtcls_mat(mask: np.ndarray) -> bytes:
    from scipy.io import savemat

    buf = io.BytesIO()
    present = np.unique(mask[(mask > 0) & (mask < 255)]).astype(np.uint8).reshape(-1, 1)
    boundaries = np.empty((1, 1), dtype=object)
    boundaries[0, 0] = np.zeros(mask.shape, dtype=np.uint8)  # a sparse matrix per class in the real files
    savemat(buf, {"GTcls": {"Boundaries": boundaries, "Segmentation": mask,
                            "CategoriesPresent": present}})
    return buf.getvalue()


def write_voc_sbd(download: Path, seed: int = 0) -> dict[str, list[str]]:
    """VOCtrainval_11-May-2012.tar and benchmark.tgz under ``download``, with overlapping lists as the
    real ones have: VOC train / val, SBD train / val (one SBD id in VOC val, one VOC train id not in
    SBD). Returns the lists by name."""
    rng = np.random.default_rng(seed)
    ids = [f"2008_{i:06d}" for i in range(10)]
    lists = {"train": ids[0:3], "val": ids[3:5], "sbd_train": ids[1:3] + ids[5:8], "sbd_val": ids[4:5] + ids[8:10]}
    download.mkdir(parents=True, exist_ok=True)
    voc_ids = lists["train"] + lists["val"]
    size = (20, 14)
    with tarfile.open(download / "VOCtrainval_11-May-2012.tar", "w") as tar:
        base = "VOCdevkit/VOC2012/"
        for stem in ids:
            _add(tar, f"{base}JPEGImages/{stem}.jpg", _jpeg(rng, size))
        for stem in voc_ids:
            mask = rng.integers(0, 21, (size[1], size[0]), dtype=np.uint8)
            mask[0, :] = 255
            _add(tar, f"{base}SegmentationClass/{stem}.png", _png(mask, palette=True))
        for name in ("train", "val"):
            _add(tar, f"{base}ImageSets/Segmentation/{name}.txt", "".join(f"{s}\n" for s in lists[name]).encode())
        _add(tar, f"{base}ImageSets/Segmentation/trainval.txt", "".join(f"{s}\n" for s in voc_ids).encode())
    with tarfile.open(download / "benchmark.tgz", "w:gz") as tar:
        base = "benchmark_RELEASE/dataset/"
        for stem in lists["sbd_train"] + lists["sbd_val"]:
            mask = rng.integers(0, 21, (size[1], size[0]), dtype=np.uint8)
            _add(tar, f"{base}cls/{stem}.mat", _gtcls_mat(mask))
            _add(tar, f"{base}img/{stem}.jpg", _jpeg(rng, size))
        _add(tar, f"{base}train.txt", "".join(f"{s}\n" for s in lists["sbd_train"]).encode())
        _add(tar, f"{base}val.txt", "".join(f"{s}\n" for s in lists["sbd_val"]).encode())
    return lists


def write_nyu_labelled(download: Path, frames: int = 6, size: tuple[int, int] = (40, 32), seed: int = 0) -> dict:
    """nyu_depth_v2_labeled.mat as MATLAB v7.3 writes it (HDF5; arrays transposed: ``images``
    frames x 3 x W x H uint8, ``rawDepths`` frames x W x H float metres, ``sceneTypes`` 1 x frames
    object references to uint16 character arrays) and splits.mat (``trainNdxs`` / ``testNdxs`` column
    vectors of 1-based frame numbers). Returns the arrays written, by name."""
    import h5py
    from scipy.io import savemat

    rng = np.random.default_rng(seed)
    download.mkdir(parents=True, exist_ok=True)
    w, h = size
    x, y = np.meshgrid(np.arange(w), np.arange(h), indexing="ij")  # smooth pictures: JPEG keeps them
    phases = rng.uniform(0, 6.28, (frames, 3))
    images = np.stack([np.stack([128 + 100 * np.sin(x / 5 + phases[i, c]) * np.cos(y / 7 + c) for c in range(3)])
                       for i in range(frames)]).astype(np.uint8)
    depths = rng.uniform(0.5, 9.5, (frames, w, h)).astype(np.float32)
    scenes = [("kitchen", "bedroom", "bathroom")[i % 3] for i in range(frames)]
    test = sorted(int(x) for x in rng.choice(np.arange(1, frames + 1), frames // 2, replace=False))
    train = [i for i in range(1, frames + 1) if i not in test]
    with h5py.File(download / "nyu_depth_v2_labeled.mat", "w") as f:
        f["images"], f["rawDepths"] = images, depths
        refs = f.create_dataset("sceneTypes", (1, frames), dtype=h5py.ref_dtype)
        for i, scene in enumerate(scenes):
            chars = f.create_dataset(f"#refs#/s{i}", data=np.array([[ord(c)] for c in scene], dtype=np.uint16))
            refs[0, i] = chars.ref
    savemat(download / "splits.mat", {"trainNdxs": np.array(train, dtype=np.float64).reshape(-1, 1),
                                      "testNdxs": np.array(test, dtype=np.float64).reshape(-1, 1)})
    return {"images": images, "depths": depths, "scenes": scenes, "train": train, "test": test}
