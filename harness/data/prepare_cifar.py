"""CIFAR-10 / CIFAR-100 from the official python archives (``cifar-10-python.tar.gz``,
``cifar-100-python.tar.gz``): the ``cifar10`` / ``cifar100`` readers read the extracted pickles as
they are, so preparing is extracting and verifying, as torchvision's ``CIFAR10`` / ``CIFAR100``
do (``download_and_extract_archive`` with the archive's md5, then ``_check_integrity`` of every
batch and the meta file): the md5s are the ones those classes record. The counts per split (50,000
/ 10,000 in 10 or 100 classes) are then ``data check``'s."""
from __future__ import annotations

from pathlib import Path

from harness.data import archives
from harness.data.prepare import Steps, require


def _official(key: str):
    from torchvision.datasets import CIFAR10, CIFAR100

    return {"cifar10": CIFAR10, "cifar100": CIFAR100}[key]


def prepare(steps: Steps) -> None:
    official = _official(steps.key)
    (archive,) = require(steps.download, official.filename)

    def extract(staging: Path) -> dict:
        archives.verify_md5(archive, official.tgz_md5)
        files = archives.extract(archive, staging)
        base = staging / official.base_folder
        for name, md5 in [*official.train_list, *official.test_list, (official.meta["filename"], official.meta["md5"])]:
            archives.verify_md5(require(base, name)[0], md5)
        return {"files": files}

    steps.run("extract", extract)
