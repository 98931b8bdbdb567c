"""Stanford Cars from its devkit release (``cars_train.tgz``, ``cars_test.tgz``, the devkit as
``car_devkit.tgz`` or its extracted ``devkit/`` folder, and ``cars_test_annos_withlabels.mat``) to
torchvision's ``StanfordCars`` layout, which the ``cars`` reader reads:
``<root>/stanford_cars/{cars_train/, cars_test/, devkit/{cars_meta.mat, cars_train_annos.mat, ...},
cars_test_annos_withlabels.mat}``. Every image an annotation file names must be in its archive; the
counts (train 8,144, test 8,041 in 196 classes) are ``data check``'s. (torchvision records no md5
for these files: the site that served them is gone, and the copies in circulation differ in packing.)

The all-images release, which the ``cars:annos`` layout reads (``car_ims.tgz`` + ``cars_annos.mat``),
numbers the images differently, so one release is not made from the other: with it in the download,
``car_ims.tgz`` is extracted beside a copy of ``cars_annos.mat`` in the root (every annotated image
checked present). A download may hold either release or both."""
from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np

from harness.data import archives
from harness.data.prepare import Steps, require
from harness.errors import DataError

FOLDER = "stanford_cars"
DEVKIT_FILES = ("cars_meta.mat", "cars_train_annos.mat")
DEVKIT_RELEASE = ("cars_train.tgz", "cars_test.tgz", "cars_test_annos_withlabels.mat")
ALL_IMAGES = ("car_ims.tgz", "cars_annos.mat")
SHOWN = 3


def _fnames(annos: Path) -> list[str]:
    from scipy.io import loadmat

    mat = loadmat(annos, squeeze_me=True)
    if "annotations" not in mat or "fname" not in (mat["annotations"].dtype.names or ()):
        raise DataError(f"{annos} has no 'annotations' with an 'fname' field: not the devkit's annotation file")
    return [str(r["fname"]) for r in np.atleast_1d(mat["annotations"])]


def _devkit(staging: Path, download: Path) -> None:
    folder = download / "devkit"
    if (download / "car_devkit.tgz").is_file():
        archives.extract(download / "car_devkit.tgz", staging)
    elif folder.is_dir():
        shutil.copytree(folder, staging / "devkit")
    else:
        raise DataError(f"{download} lacks car_devkit.tgz (or its extracted devkit/ folder)")
    absent = [n for n in DEVKIT_FILES if not (staging / "devkit" / n).is_file()]
    if absent:
        raise DataError(f"the devkit in {download} lacks {', '.join(absent)}: not the official devkit")


def _all_images(steps: Steps) -> None:
    from scipy.io import loadmat

    car_ims, annos = require(steps.download, *ALL_IMAGES)

    def convert(staging: Path) -> dict:
        archives.place(annos, annos.name, staging)
        archives.extract(car_ims, staging)
        mat = loadmat(staging / annos.name, squeeze_me=True)
        if "annotations" not in mat or "relative_im_path" not in (mat["annotations"].dtype.names or ()):
            raise DataError(f"{annos} has no 'annotations' with 'relative_im_path': not the all-images release's file")
        paths = [str(r["relative_im_path"]) for r in np.atleast_1d(mat["annotations"])]
        missing = [p for p in paths if not (staging / p).is_file()]
        if missing:
            raise DataError(f"{car_ims.name} lacks {len(missing)} image(s) that {annos.name} names, e.g. "
                            f"{', '.join(missing[:SHOWN])}: download it again")
        return {"images": len(paths)}

    steps.run("car_ims", convert)


def prepare(steps: Steps) -> None:
    devkit = any((steps.download / n).exists() for n in DEVKIT_RELEASE)
    if not devkit and not (steps.download / ALL_IMAGES[0]).is_file():
        raise DataError(f"{steps.download} holds neither Stanford Cars release: the devkit one ("
                        f"{', '.join(DEVKIT_RELEASE)}, car_devkit.tgz) or the all-images one ({', '.join(ALL_IMAGES)})")
    if (steps.download / ALL_IMAGES[0]).is_file():
        _all_images(steps)
    if devkit:
        _devkit_release(steps)


def _devkit_release(steps: Steps) -> None:
    train_tgz, test_tgz, test_annos = require(steps.download, *DEVKIT_RELEASE)

    def convert(staging: Path) -> dict:
        base = staging / FOLDER
        _devkit(base, steps.download)
        archives.place(test_annos, test_annos.name, base)
        counts = {}
        for split, tgz, annos in (("train", train_tgz, base / "devkit" / "cars_train_annos.mat"),
                                  ("test", test_tgz, base / test_annos.name)):
            archives.extract(tgz, base)
            missing = [f for f in _fnames(annos) if not (base / f"cars_{split}" / f).is_file()]
            if missing:
                raise DataError(f"{tgz.name} lacks {len(missing)} image(s) that {annos.name} names, e.g. "
                                f"{', '.join(missing[:SHOWN])}: download it again")
            counts[f"{split} images"] = len(_fnames(annos))
        return counts

    steps.run("cars", convert)
