"""Tiny downloads in the official packing of SUN397, GTSRB and Caltech-101, for the `ssl-bench data
prepare` tests (tests/test_data_prepare_sun397_gtsrb_caltech.py); every image is a seeded draw:

- SUN397: SUN397.tar.gz (SUN397/{ClassName.txt, <letter>/<class>/sun_<id>.jpg}) and Partitions.zip
  (ClassName.txt, Training_NN.txt, Testing_NN.txt: one ``/<letter>/<class>/<file>`` a line);
- GTSRB: GTSRB_Final_Training_Images.zip (GTSRB/Final_Training/Images/<class>/<track>_<n>.ppm with
  GT-<class>.csv), GTSRB-Training_fixed.zip (GTSRB/Training/<class>/...), GTSRB_Final_Test_Images.zip
  (GTSRB/Final_Test/Images/<n>.ppm) and GTSRB_Final_Test_GT.zip (GT-final_test.csv: ``;``-separated,
  Filename;Width;Height;Roi.X1;Roi.Y1;Roi.X2;Roi.Y2;ClassId);
- Caltech-101: caltech-101.zip (caltech-101/101_ObjectCategories.tar.gz holding
  101_ObjectCategories/<class>/image_NNNN.jpg).
"""
from __future__ import annotations

import io
import tarfile
import zipfile
from pathlib import Path

import numpy as np
from PIL import Image

SUN_CLASSES = ("/a/abbey", "/b/bakery/shop", "/b/beach")  # SUN397 has classes two levels deep
GTSRB_TRAIN = {0: 3, 1: 1, 2: 2}  # images per class folder
GTSRB_TEST = [2, 0, 0, 2, 1]
CALTECH = {"BACKGROUND_Google": 35, "accordion": 40, "airplanes": 45}  # 30 draws leave some undrawn


def _jpeg(rng: np.random.Generator, fmt: str = "JPEG") -> bytes:
    buf = io.BytesIO()
    Image.fromarray(rng.integers(0, 256, (8, 8, 3), dtype=np.uint8)).save(buf, format=fmt)
    return buf.getvalue()


def _tar(path: Path, files: dict[str, bytes]) -> None:
    with tarfile.open(path, "w:gz") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))


def _zip(path: Path, files: dict[str, bytes]) -> None:
    with zipfile.ZipFile(path, "w") as zf:
        for name, data in files.items():
            zf.writestr(name, data)


def write_sun397_download(download: Path, seed: int = 0) -> dict[str, list[str]]:
    """SUN397.tar.gz and Partitions.zip (partitions 01 and 02); the partition 01 lists."""
    rng = np.random.default_rng(seed)
    download.mkdir(parents=True, exist_ok=True)
    images = [f"{c}/sun_{c.count('/')}{k}.jpg" for c in SUN_CLASSES for k in range(4)]
    names = "".join(f"{c}\n" for c in SUN_CLASSES).encode()
    _tar(download / "SUN397.tar.gz", {"SUN397/ClassName.txt": names, "SUN397/README.txt": b"SUN397\n",
                                       **{f"SUN397{p}": _jpeg(rng) for p in images}})
    lists = {"Training_01.txt": images[0::2], "Testing_01.txt": images[1::2],
             "Training_02.txt": images[1::2], "Testing_02.txt": images[0::2]}
    _zip(download / "Partitions.zip", {"ClassName.txt": names,
                                        **{n: "".join(f"{p}\n" for p in v).encode() for n, v in lists.items()}})
    return lists


def write_gtsrb_download(download: Path, seed: int = 0) -> list[int]:
    """The official training zip, torchvision's fixed one, the test images and their ground truth; the
    test labels."""
    rng = np.random.default_rng(seed)
    download.mkdir(parents=True, exist_ok=True)
    train = {f"{c:05d}/00000_{k:05d}.ppm": _jpeg(rng, "PPM") for c, n in GTSRB_TRAIN.items() for k in range(n)}
    train.update({f"{c:05d}/GT-{c:05d}.csv": b"Filename;Width;Height;Roi.X1;Roi.Y1;Roi.X2;Roi.Y2;ClassId\n"
                  for c in GTSRB_TRAIN})
    _zip(download / "GTSRB_Final_Training_Images.zip",
         {f"GTSRB/Final_Training/Images/{k}": v for k, v in train.items()})
    _zip(download / "GTSRB-Training_fixed.zip", {f"GTSRB/Training/{k}": v for k, v in train.items()})
    test = {f"{i:05d}.ppm": _jpeg(rng, "PPM") for i in range(len(GTSRB_TEST))}
    _zip(download / "GTSRB_Final_Test_Images.zip", {f"GTSRB/Final_Test/Images/{k}": v for k, v in test.items()})
    header = "Filename;Width;Height;Roi.X1;Roi.Y1;Roi.X2;Roi.Y2;ClassId\n"
    rows = "".join(f"{i:05d}.ppm;8;8;1;1;7;7;{c}\n" for i, c in enumerate(GTSRB_TEST))
    _zip(download / "GTSRB_Final_Test_GT.zip", {"GT-final_test.csv": (header + rows).encode()})
    return GTSRB_TEST


def write_caltech101_download(download: Path, seed: int = 0) -> None:
    """caltech-101.zip wrapping 101_ObjectCategories.tar.gz, as data.caltech.edu serves it."""
    rng = np.random.default_rng(seed)
    download.mkdir(parents=True, exist_ok=True)
    inner = download / ".inner.tar.gz"
    _tar(inner, {f"101_ObjectCategories/{c}/image_{k + 1:04d}.jpg": _jpeg(rng)
                 for c, n in CALTECH.items() for k in range(n)})
    _zip(download / "caltech-101.zip", {"caltech-101/101_ObjectCategories.tar.gz": inner.read_bytes(),
                                        "caltech-101/show_annotation.m": b"% annotation viewer\n"})
    inner.unlink()
