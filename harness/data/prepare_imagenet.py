"""ImageNet-1K from its official archives to the ImageFolder layout the ``imagenet`` reader reads,
through torchvision's own ``parse_devkit_archive`` / ``parse_val_archive`` / ``parse_train_archive``
(which verify each archive's md5 first). The devkit's meta.bin (torchvision's ImageNet meta file)
stays in the prepared root, so ``torchvision.datasets.ImageNet(out)`` reads it too.

A ``val/`` already in the output (prepared by hand, or by another tool) is not overwritten: it is
checked against the devkit's ground truth, image by image, and a folder whose labels are shuffled
is refused, naming the misplaced images. ReaL's real.json and SimCLRv2's 1% / 10% lists, when the
download holds them, are checked and put beside the images (harness.data.prepare_imagenet_labels).
"""
from __future__ import annotations

import os
import re
from pathlib import Path

from harness.data import prepare_imagenet_labels
from harness.data.prepare import Steps, require
from harness.errors import DataError

VAL_NAME = re.compile(r"ILSVRC2012_val_(\d{8})\.JPEG$")


def _archive(name: str) -> str:
    from torchvision.datasets.imagenet import ARCHIVE_META

    return ARCHIVE_META[name][0]


def _linked(staging: Path, archive: Path) -> Path:
    link = staging / archive.name
    os.symlink(archive, link)  # torchvision reads the archive from its root; the download stays untouched
    return link


def val_wnids(root: Path) -> list[str]:
    """The wnid of each val image (index = image number - 1), from the devkit's meta.bin."""
    from torchvision.datasets.imagenet import load_meta_file

    return list(load_meta_file(str(root))[1])


def misplaced_val_images(val: Path, wnids: list[str]) -> tuple[list[str], int]:
    """(val images in a class folder other than the devkit's ground truth, images seen)."""
    wrong, seen = [], 0
    for folder in sorted(p for p in val.iterdir() if p.is_dir()):
        for image in sorted(folder.iterdir()):
            m = VAL_NAME.match(image.name)
            if m is None:
                continue
            seen += 1
            index = int(m.group(1)) - 1
            if index >= len(wnids) or wnids[index] != folder.name:
                truth = wnids[index] if index < len(wnids) else "no label"
                wrong.append(f"{folder.name}/{image.name} (devkit: {truth})")
    return wrong, seen


def check_val_labels(out: Path) -> dict:
    wrong, seen = misplaced_val_images(out / "val", val_wnids(out))
    if not seen:
        raise DataError(f"{out / 'val'} holds no ILSVRC2012_val_*.JPEG in class folders")
    if wrong:
        raise DataError(f"{len(wrong)} of the {seen} val images in {out / 'val'} are not in the class folder the "
                        f"devkit's ground truth gives (labels shuffled or folders renamed), e.g. "
                        f"{', '.join(wrong[:3])}; delete {out / 'val'} and prepare again")
    return {"val images checked": seen}


def check(root: Path) -> tuple[list[str], list[str]]:
    """`data check imagenet`'s own check: with the devkit's meta.bin in the root (a prepared root),
    every val image against the ground truth; then the ReaL labels and subset lists in the root."""
    facts, problems = prepare_imagenet_labels.check(root)
    if not (root / "meta.bin").is_file() or not (root / "val").is_dir():
        return ["val labels: not checked (no devkit meta.bin in the root; `data prepare imagenet` writes it)",
                *facts], problems
    wrong, seen = misplaced_val_images(root / "val", val_wnids(root))
    fact = f"val labels: {seen - len(wrong)} of {seen} images in the devkit's class folder"
    return [fact, *facts], ([f"{len(wrong)} val images in the wrong class folder, e.g. {', '.join(wrong[:3])}"]
                            if wrong else []) + problems


def prepare(steps: Steps) -> None:
    from torchvision.datasets import imagenet as tv

    devkit, val_tar = require(steps.download, _archive("devkit"), _archive("val"))

    def labels(staging: Path) -> dict:
        link = _linked(staging, devkit)
        tv.parse_devkit_archive(str(staging), link.name)
        link.unlink()
        return {"classes": len(set(val_wnids(staging)))}

    def val(staging: Path) -> dict:
        link = _linked(staging, val_tar)
        tv.parse_val_archive(str(staging), link.name, wnids=val_wnids(steps.out), folder="val")
        link.unlink()
        return {"val images": sum(1 for _ in (staging / "val").glob("*/*"))}

    steps.run("devkit", labels)
    if (steps.out / "val").is_dir() and "val" not in steps.done:
        steps.log(f"  val: {steps.out / 'val'} exists; checked against the devkit's ground truth")
        steps.run("val", lambda staging: check_val_labels(steps.out))
    else:
        steps.run("val", val)
    train_tar = steps.download / _archive("train")
    if train_tar.is_file():
        def train(staging: Path) -> dict:
            link = _linked(staging, train_tar)
            tv.parse_train_archive(str(staging), link.name, folder="train")
            link.unlink()
            return {"train classes": sum(1 for p in (staging / "train").iterdir() if p.is_dir())}

        steps.run("train", train)
    else:
        steps.log(f"  train: {train_tar.name} not in the download; val only")
    prepare_imagenet_labels.prepare(steps, val_wnids(steps.out))
    check_val_labels(steps.out)
