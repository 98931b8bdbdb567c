"""GTSRB from its official zips to torchvision's ``GTSRB`` layout, which the ``gtsrb`` reader reads:
``<root>/gtsrb/GTSRB/Training/<class>/*.ppm``, ``<root>/gtsrb/GTSRB/Final_Test/Images/*.ppm`` and
``<root>/gtsrb/GT-final_test.csv``.

- Training: ``GTSRB-Training_fixed.zip`` (the archive torchvision downloads, members
  ``GTSRB/Training/<class>/``; 26,640 images, the official size ``data check`` compares with) is used
  when present; else the benchmark's ``GTSRB_Final_Training_Images.zip``
  (``GTSRB/Final_Training/Images/<class>/``: 39,209 images, so ``data check`` reports the train count
  as differing from 26,640) with its class folders moved to ``Training/``.
- Test: ``GTSRB_Final_Test_Images.zip`` (``GTSRB/Final_Test/Images/``) and ``GT-final_test.csv`` out of
  ``GTSRB_Final_Test_GT.zip``; every image the ground truth names must be in the images zip.

torchvision records these zips' md5s only inside its download code, so none is checked here."""
from __future__ import annotations

import csv
import os
from pathlib import Path

from harness.data import archives
from harness.data.prepare import Steps, require
from harness.errors import DataError

FOLDER = "gtsrb"
FIXED, OFFICIAL = "GTSRB-Training_fixed.zip", "GTSRB_Final_Training_Images.zip"
TEST_IMAGES, TEST_GT = "GTSRB_Final_Test_Images.zip", "GTSRB_Final_Test_GT.zip"
SHOWN = 3


def _training(staging: Path, archive: Path) -> int:
    names = archives.extract_zip(archive, staging / ".zip")
    inner = "Training" if archive.name == FIXED else "Final_Training/Images"
    source = staging / ".zip" / "GTSRB" / inner
    if not source.is_dir():
        raise DataError(f"{archive} has no GTSRB/{inner}/ folder: not the official archive")
    target = staging / FOLDER / "GTSRB" / "Training"
    target.parent.mkdir(parents=True, exist_ok=True)
    os.rename(source, target)
    return sum(n.endswith(".ppm") for n in names)


def _test(staging: Path, images: Path, gt: Path) -> int:
    base = staging / FOLDER
    archives.extract_zip(images, staging / ".test")
    source = staging / ".test" / "GTSRB" / "Final_Test" / "Images"
    if not source.is_dir():
        raise DataError(f"{images} has no GTSRB/Final_Test/Images/ folder: not the official archive")
    (base / "GTSRB" / "Final_Test").mkdir(parents=True, exist_ok=True)
    os.rename(source, base / "GTSRB" / "Final_Test" / "Images")
    truth = archives.zip_member(gt, "GT-final_test.csv", base)
    with open(truth) as f:
        rows = list(csv.DictReader(f, delimiter=";", skipinitialspace=True))
    if not rows or "Filename" not in rows[0] or "ClassId" not in rows[0]:
        raise DataError(f"{truth.name} in {gt} has no Filename / ClassId columns: not the official ground truth")
    missing = [r["Filename"] for r in rows if not (base / "GTSRB" / "Final_Test" / "Images" / r["Filename"]).is_file()]
    if missing:
        raise DataError(f"{images.name} lacks {len(missing)} image(s) that GT-final_test.csv names, e.g. "
                        f"{', '.join(missing[:SHOWN])}: download it again")
    return len(rows)


def prepare(steps: Steps) -> None:
    training = FIXED if (steps.download / FIXED).is_file() else OFFICIAL
    train_zip, images, gt = require(steps.download, training, TEST_IMAGES, TEST_GT)
    if training == OFFICIAL:
        steps.log(f"  {FIXED} (torchvision's, 26,640 training images) not in the download: "
                  f"{OFFICIAL} gives 39,209")
    steps.run("train", lambda staging: {"images": _training(staging, train_zip)})
    steps.run("test", lambda staging: {"images": _test(staging, images, gt)})
