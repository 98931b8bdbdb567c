"""Tiny downloads in the official packing of ImageNet's extra label files, CIFAR, iNaturalist,
Flowers-102 and Stanford Cars, for the `ssl-bench data prepare` tests (tests/test_data_prepare_*.py).
The extracted contents come from tests/official_split_fixtures.py's writers (the official pickle
keys, JSON keys and .mat fields) and are packed as the official archives are:

- ImageNet: real.json (a list of label lists, one per val image: class indices in sorted-wnid
  order), 1percent.txt / 10percent.txt (one training file name a line, SimCLRv2's format);
- CIFAR: cifar-10-python.tar.gz (cifar-10-batches-py/...), cifar-100-python.tar.gz (cifar-100-python/...);
- iNaturalist: train_val{year}.tar.gz (train_val{year}/<super>/<id>/<image>) and the JSON files as
  <name>.json.tar.gz, the competition's packing;
- Flowers-102: 102flowers.tgz (jpg/image_NNNNN.jpg), imagelabels.mat, setid.mat;
- Stanford Cars: cars_train.tgz (cars_train/NNNNN.jpg), cars_test.tgz, car_devkit.tgz
  (devkit/{cars_meta.mat, cars_train_annos.mat, cars_test_annos.mat}), cars_test_annos_withlabels.mat
  (struct array ``annotations``: bbox_x1, bbox_y1, bbox_x2, bbox_y2, class, fname).
- COCO 2017 instances: train2017/, val2017/ and annotations/instances_<split>.json (write_coco2017).

Each writer returns what a test compares against (labels, md5s); every draw is seeded.
"""
from __future__ import annotations

import hashlib
import io
import json
import shutil
import tarfile
import tempfile
from pathlib import Path

import numpy as np
from PIL import Image

from official_split_fixtures import write_cars, write_cifar10, write_cifar100, write_flowers, write_inat


def md5(path: Path) -> str:
    return hashlib.md5(path.read_bytes()).hexdigest()


def snapshot(folder: Path) -> dict[str, str]:
    """Every file under ``folder`` by its sha256 (to show a download was not written into)."""
    return {p.relative_to(folder).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def _tar(archive: Path, base: Path, *names: str) -> None:
    with tarfile.open(archive, "w:gz") as tar:
        for name in names:
            tar.add(base / name, arcname=name)


def write_imagenet_labels(download: Path, val_wnids: list[str], train_names: list[str]) -> dict:
    """real.json for the val images whose wnids are ``val_wnids`` (image 1 without label, image 2 with
    a second one), and 1percent.txt / 10percent.txt naming some of ``train_names``."""
    classes = sorted(set(val_wnids))
    real = [[classes.index(w)] for w in val_wnids]
    real[0], real[1] = [], sorted({real[1][0], (real[1][0] + 1) % len(classes)})
    (download / "real.json").write_text(json.dumps(real))
    lists = {"1percent.txt": sorted(train_names)[:2], "10percent.txt": sorted(train_names)[:4]}
    for name, names in lists.items():
        (download / name).write_text("".join(f"{n}\n" for n in names))
    return {"real": real, **lists}


def write_cifar_download(download: Path, key: str) -> dict:
    """The key's official archive under ``download``; md5s of the archive and of each member."""
    download.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        root = (write_cifar10 if key == "cifar10" else write_cifar100)(Path(tmp))
        folder = next(p for p in root.iterdir() if p.is_dir())
        members = {p.name: md5(p) for p in folder.iterdir()}
        archive = download / f"{folder.name.replace('-batches-py', '-python')}.tar.gz"
        _tar(archive, root, folder.name)
    return {"archive": archive, "tgz_md5": md5(archive), "members": members}


def write_inat_download(download: Path, year: int) -> dict:
    """train_val{year}.tar.gz and the three JSON files as .json.tar.gz; the archive's md5 and the
    JSON documents."""
    download.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        root = write_inat(Path(tmp), year)
        archive = download / f"train_val{year}.tar.gz"
        _tar(archive, root, f"train_val{year}")
        docs = {}
        for name in (f"train{year}.json", f"val{year}.json", "categories.json"):
            docs[name] = json.loads((root / name).read_text())
            _tar(download / f"{name}.tar.gz", root, name)
    return {"md5": md5(archive), "docs": docs}


def write_flowers_download(download: Path) -> dict[str, str]:
    """102flowers.tgz, imagelabels.mat, setid.mat; their md5s by file name."""
    download.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        root = write_flowers(Path(tmp))
        _tar(download / "102flowers.tgz", root, "jpg")
        for name in ("imagelabels.mat", "setid.mat"):
            shutil.copyfile(root / name, download / name)
    return {p.name: md5(p) for p in download.iterdir()}


# Stanford Cars: (class 1-based) per image of each split, 3 classes
CARS_SPLITS = {"train": [1, 2, 3, 2, 1], "test": [3, 1, 2]}


def _cars_annos(path: Path, classes: list[int] | None, n: int, rng: np.random.Generator) -> None:
    from scipy.io import savemat

    fields = ["bbox_x1", "bbox_y1", "bbox_x2", "bbox_y2"] + (["class"] if classes else []) + ["fname"]
    records = np.zeros((1, n), dtype=[(f, object) for f in fields])
    for i in range(n):
        box = [np.array([[int(v)]], dtype=np.uint16) for v in sorted(rng.integers(1, 30, 4))]
        cls = [np.array([[classes[i]]], dtype=np.uint8)] if classes else []
        records[0, i] = tuple(box + cls + [np.array([f"{i + 1:05d}.jpg"])])
    savemat(path, {"annotations": records})


def write_cars_download(download: Path, seed: int = 0) -> dict[str, list[int]]:
    """The devkit release under ``download``; the 1-based classes per split."""
    from scipy.io import savemat

    rng = np.random.default_rng(seed)
    download.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for split, classes in CARS_SPLITS.items():
            for i in range(len(classes)):
                (root / f"cars_{split}").mkdir(exist_ok=True)
                Image.fromarray(rng.integers(0, 256, (10, 14, 3), dtype=np.uint8)).save(
                    root / f"cars_{split}" / f"{i + 1:05d}.jpg")
            _tar(download / f"cars_{split}.tgz", root, f"cars_{split}")
        (root / "devkit").mkdir()
        names = np.empty((1, 3), dtype=object)
        names[0, :] = [f"Make Model {k}" for k in range(1, 4)]
        savemat(root / "devkit" / "cars_meta.mat", {"class_names": names})
        _cars_annos(root / "devkit" / "cars_train_annos.mat", CARS_SPLITS["train"], 5, rng)
        _cars_annos(root / "devkit" / "cars_test_annos.mat", None, 3, rng)
        _tar(download / "car_devkit.tgz", root, "devkit")
        _cars_annos(download / "cars_test_annos_withlabels.mat", CARS_SPLITS["test"], 3, rng)
    return CARS_SPLITS


def write_cars_all_images(download: Path) -> None:
    """The all-images release: car_ims.tgz (car_ims/NNNNNN.jpg) and cars_annos.mat
    (tests/official_split_fixtures.py's records)."""
    download.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        root = write_cars(Path(tmp))
        _tar(download / "car_ims.tgz", root, "car_ims")
        shutil.copyfile(root / "cars_annos.mat", download / "cars_annos.mat")


def write_nyu_probe3d(download: Path, seed: int = 0) -> dict:
    """Probe3D's NYU download: nyu_depth_v2_labeled.mat (tests/official_downloads.py), FAIR's
    nyuv2_surfacenormal_metadata.zip (surfacenormal_metadata/all_normals.pklz: gzipped pickle of
    {"all_normals": (N, H, W, 3) float32}; train_SN40.json / test_SN40.json: lists of entries whose
    ``img`` starts with the 1-based frame number, the only field the converter reads) and GeoNet's
    data1.zip / data2.zip (data1/<name>.mat with ``img`` (stored minus twice the channel means),
    ``depth``, ``norm``). Returns the labelled arrays, the normals and the splits."""
    import gzip
    import pickle
    import zipfile

    from scipy.io import savemat

    from official_downloads import write_nyu_labelled

    rng = np.random.default_rng(seed)
    written = write_nyu_labelled(download)
    n, _, w, h = written["images"].shape
    normals = rng.normal(size=(n, h, w, 3)).astype(np.float32)
    with zipfile.ZipFile(download / "nyuv2_surfacenormal_metadata.zip", "w") as zf:
        zf.writestr("surfacenormal_metadata/all_normals.pklz",
                    gzip.compress(pickle.dumps({"all_normals": normals}, protocol=2)))
        for split in ("train", "test"):
            entries = [{"img": f"{i:04d}_rgb.png"} for i in written[split]]
            zf.writestr(f"surfacenormal_metadata/{split}_SN40.json", json.dumps(entries))
    geonet = []
    for part in ("data1", "data2"):
        with zipfile.ZipFile(download / f"{part}.zip", "w") as zf:
            for k in range(2):
                buf = io.BytesIO()
                img = rng.integers(0, 256, (h, w, 3)).astype(np.float64) - 2 * np.array([122.175, 116.169, 103.508])
                savemat(buf, {"img": img, "depth": rng.uniform(0.5, 9.5, (h, w)), "norm": rng.normal(size=(h, w, 3))})
                zf.writestr(f"{part}/{part}_{k:04d}.mat", buf.getvalue())
                geonet.append(f"{part}_{k:04d}.mat")
    return {**written, "normals": normals, "geonet": geonet}


# COCO-Stuff: image ids per split; masks hold stuffthingmaps values (0-based COCO ids, 255 unlabelled)
COCO_STUFF_IDS = {"train2017": [9, 25, 30], "val2017": [139, 285]}


def write_coco_stuff(download: Path, seed: int = 0) -> dict[str, np.ndarray]:
    """train2017.zip / val2017.zip (<split>/<12-digit id>.jpg) and stuffthingmaps_trainval2017.zip
    (<split>/<12-digit id>.png, grey, 0-based category ids 0..181 and 255); the masks by name."""
    import zipfile

    rng = np.random.default_rng(seed)
    download.mkdir(parents=True, exist_ok=True)
    masks = {}
    with zipfile.ZipFile(download / "stuffthingmaps_trainval2017.zip", "w") as mz:
        for split, ids in COCO_STUFF_IDS.items():
            with zipfile.ZipFile(download / f"{split}.zip", "w") as iz:
                for i in ids:
                    buf = io.BytesIO()
                    Image.fromarray(rng.integers(0, 256, (12, 16, 3), dtype=np.uint8)).save(buf, "JPEG")
                    iz.writestr(f"{split}/{i:012d}.jpg", buf.getvalue())
                    mask = rng.choice(np.r_[np.arange(182), 255], (12, 16)).astype(np.uint8)
                    buf = io.BytesIO()
                    Image.fromarray(mask).save(buf, "PNG")
                    mz.writestr(f"{split}/{i:012d}.png", buf.getvalue())
                    masks[f"{split}/{i:012d}"] = mask
    return masks


def write_coco_train2014(root: Path, ids: list[int], seed: int = 0) -> dict[int, list[list[float]]]:
    """COCO 2014 train as extracted from train2014.zip and annotations_trainval2014.zip, for the
    images ``ids``: train2014/COCO_train2014_<12-digit id>.jpg (hard links of one small JPEG: the
    layout, not the pixels, is under test) and annotations/instances_train2014.json with the official
    keys (info, licenses, images, annotations with bbox [x, y, w, h], iscrowd, categories). Returns
    the boxes per image id (a crowd box first, then two others)."""
    import os

    rng = np.random.default_rng(seed)
    folder = root / "train2014"
    folder.mkdir(parents=True, exist_ok=True)
    first = folder / f"COCO_train2014_{ids[0]:012d}.jpg"
    Image.fromarray(rng.integers(0, 256, (8, 8, 3), dtype=np.uint8)).save(first)
    for i in ids[1:]:
        os.link(first, folder / f"COCO_train2014_{i:012d}.jpg")
    images = [{"id": i, "file_name": f"COCO_train2014_{i:012d}.jpg", "width": 8, "height": 8, "license": 1,
               "coco_url": "", "date_captured": "", "flickr_url": ""} for i in ids]
    annotations, boxes = [], {}
    for i in ids[:3]:
        boxes[i] = [[0.5, 1.5, 3.0, 2.0], [1.0, 1.0, 4.5, 5.5], [2.0, 0.0, 2.5, 1.0]]
        for k, box in enumerate(boxes[i]):
            annotations.append({"id": len(annotations) + 1, "image_id": i, "category_id": 1 + k, "bbox": box,
                                "area": box[2] * box[3], "iscrowd": int(k == 0), "segmentation": []})
    categories = [{"id": c, "name": f"category {c}", "supercategory": "thing"} for c in range(1, 91)]
    (root / "annotations").mkdir(exist_ok=True)
    (root / "annotations" / "instances_train2014.json").write_text(json.dumps(
        {"info": {"year": 2014}, "licenses": [], "images": images, "annotations": annotations,
         "categories": categories}))
    return boxes


# COCO's 80 category ids: 1..90 without the ten ids the 2014 paper's list left unused
COCO_CATEGORY_IDS = tuple(c for c in range(1, 91) if c not in (12, 26, 29, 30, 45, 66, 68, 69, 71, 83))
LINKS = 60_000


def write_coco2017(root: Path, sizes: dict[str, int], seed: int = 0) -> dict[str, list[Path]]:
    """COCO 2017 as extracted from train2017.zip, val2017.zip and annotations_trainval2017.zip:
    <split>/<12-digit id>.jpg (hard links of a small JPEG, a fresh one every LINKS images: the layout,
    not the pixels, is under test) and annotations/instances_<split>.json with the official keys (info,
    licenses, images with id, file_name, width, height, license, coco_url, date_captured, flickr_url;
    annotations with id, image_id, category_id, bbox [x, y, w, h], area, iscrowd, segmentation;
    categories with id, name, supercategory: COCO's 80 ids). ``sizes``: split -> number of images. Returns each split's
    image files."""
    import os

    rng = np.random.default_rng(seed)
    (root / "annotations").mkdir(parents=True, exist_ok=True)
    categories = [{"id": c, "name": f"category {c}", "supercategory": "thing"} for c in COCO_CATEGORY_IDS]
    files, first_id = {}, 1
    for split, n in sizes.items():
        folder = root / split
        folder.mkdir(parents=True, exist_ok=True)
        ids = list(range(first_id, first_id + n))
        first_id += n
        files[split] = [folder / f"{i:012d}.jpg" for i in ids]
        for k, f in enumerate(files[split]):
            if k % LINKS == 0:  # a file takes at most 65,000 links (ext4)
                base = f
                Image.fromarray(rng.integers(0, 256, (8, 8, 3), dtype=np.uint8)).save(f)
            else:
                os.link(base, f)
        images = [{"id": i, "file_name": f.name, "width": 8, "height": 8, "license": 1, "coco_url": "",
                   "date_captured": "", "flickr_url": ""} for i, f in zip(ids, files[split])]
        annotations = [{"id": k + 1, "image_id": i, "category_id": COCO_CATEGORY_IDS[k % 80],
                        "bbox": [1.0, 1.0, 4.0, 3.0], "area": 12.0, "iscrowd": 0,
                        "segmentation": [[1.0, 1.0, 5.0, 1.0, 5.0, 4.0, 1.0, 4.0]]}
                       for k, i in enumerate(ids[:3])]
        (root / "annotations" / f"instances_{split}.json").write_text(json.dumps(
            {"info": {"year": 2017, "version": "1.0"}, "licenses": [], "images": images,
             "annotations": annotations, "categories": categories}))
    return files


def _rle(mask: np.ndarray) -> dict:
    from pycocotools import mask as rle

    encoded = rle.encode(np.asfortranarray(mask.astype(np.uint8)))
    return {"size": [int(v) for v in encoded["size"]], "counts": encoded["counts"].decode()}


def write_pascal_context(download: Path, seed: int = 0) -> dict:
    """VOCtrainval_03-May-2010.tar (VOCdevkit/VOC2010/JPEGImages/<name>.jpg) and trainval_merged.json
    with the PASCAL in Detail keys (info, images with image_id / file_name / height / width / phase,
    annos_segmentation with COCO RLE ``segmentation`` and ``category_id``, categories with
    category_id / name / supercategory / onlysemantic / parts, parts, annos_occlusion, annos_boundary,
    annos_joints). Categories: 'accordion' (id 1, not one of the 59) and the 59 classes in
    alphabetical order with gaps between their ids, two written with a space ('potted plant', 'tv
    monitor'). Returns the class masks (category ids) by image name, the kept ids and the phases."""
    from mmseg.datasets import PascalContextDataset59

    rng = np.random.default_rng(seed)
    names = list(PascalContextDataset59.METAINFO["classes"])
    spaced = {"pottedplant": "potted plant", "tvmonitor": "tv monitor"}
    categories = [{"category_id": 1, "name": "accordion", "supercategory": "object", "onlysemantic": 0, "parts": []}]
    categories += [{"category_id": 2 + 3 * k, "name": spaced.get(n, n), "supercategory": "object",
                    "onlysemantic": 0, "parts": []} for k, n in enumerate(names)]
    kept = [0] + [2 + 3 * k for k in range(len(names))]
    phases = {"2008_000002": "train", "2008_000003": "train", "2008_000007": "val", "2008_000008": "test"}
    images, segments, truth = [], [], {}
    h, w = 10, 12
    with tempfile.TemporaryDirectory() as tmp:
        jpegs = Path(tmp) / "VOCdevkit" / "VOC2010" / "JPEGImages"
        jpegs.mkdir(parents=True)
        for stem, phase in phases.items():
            Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8)).save(jpegs / f"{stem}.jpg")
            image_id = int(stem[:4] + stem[5:])
            images.append({"image_id": image_id, "file_name": f"{stem}.jpg", "height": h, "width": w,
                           "phase": phase, "date_captured": ""})
            mask = np.zeros((h, w), dtype=np.int64)
            for _ in range(3):  # overlapping rectangles: a later one over an earlier one
                cat = int(rng.choice(kept[1:]))
                y, x = rng.integers(0, h - 3), rng.integers(0, w - 3)
                region = np.zeros((h, w), dtype=bool)
                region[y:y + rng.integers(3, h - y + 1), x:x + rng.integers(3, w - x + 1)] = True
                mask[region] = cat
                segments.append({"id": len(segments) + 1, "image_id": image_id, "category_id": cat,
                                 "segmentation": _rle(region), "iscrowd": 0, "area": int(region.sum()),
                                 "bbox": [int(x), int(y), 3, 3], "parts": []})
            truth[stem] = mask
        with tarfile.open(download / "VOCtrainval_03-May-2010.tar", "w") as tar:
            tar.add(Path(tmp) / "VOCdevkit", arcname="VOCdevkit")
    doc = {"info": {"description": "PASCAL in Detail"}, "images": images, "annos_segmentation": segments,
           "categories": categories, "parts": [], "annos_occlusion": [], "annos_boundary": [], "annos_joints": []}
    (download / "trainval_merged.json").write_text(json.dumps(doc))
    return {"masks": truth, "kept": kept, "phases": phases}
