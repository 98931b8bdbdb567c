"""iNaturalist 2018 / 2019 from the competition's files (github.com/visipedia/inat_comp) to the
layout the ``inat2018`` / ``inat2019`` readers read: ``train_val{year}.tar.gz`` extracted as it is
(``train_val{year}/<super>/<category id>/<image>``, the archive checked against the md5
torchvision's ``INaturalist`` records), and ``train{year}.json``, ``val{year}.json`` and the
un-obfuscated ``categories.json`` beside it (each as downloaded, ``<name>.tar.gz``, or already
extracted). Every image the two JSON files list must be in the archive; the counts (2018: 437,513 /
24,426 in 8,142 classes; 2019: 265,213 / 3,030 in 1,010) are ``data check``'s."""
from __future__ import annotations

import json
from pathlib import Path

from harness.data import archives
from harness.data.prepare import Steps
from harness.errors import DataError

SHOWN = 3


def _year(key: str) -> str:
    return key.removeprefix("inat")


def _listed(root: Path, year: str) -> list[str]:
    names = []
    for split in ("train", "val"):
        doc = json.loads((root / f"{split}{year}.json").read_text())
        if not isinstance(doc, dict) or not isinstance(doc.get("images"), list):
            raise DataError(f"{split}{year}.json has no 'images' list: not the official annotation file")
        names += [str(image.get("file_name", "")) for image in doc["images"]]
    return names


def prepare(steps: Steps) -> None:
    from torchvision.datasets.inaturalist import DATASET_MD5

    year = _year(steps.key)
    names = [f"train{year}.json", f"val{year}.json", "categories.json"]
    found = {name: archives.file_or_tarred(steps.download, name) for name in names}
    archive = steps.download / f"train_val{year}.tar.gz"
    absent = [n for n, p in found.items() if p is None] + ([archive.name] if not archive.is_file() else [])
    if absent:
        raise DataError(f"{steps.download} lacks {', '.join(absent)} (each JSON file as itself or as "
                        f"<name>.tar.gz; `ssl-bench data list {steps.key}` says where they come from)")

    def annotations(staging: Path) -> dict:
        for name, source in found.items():
            archives.place(source, name, staging)
        return {"files": len(found)}

    def images(staging: Path) -> dict:
        archives.verify_md5(archive, DATASET_MD5[year])
        written = archives.extract(archive, staging)
        missing = [n for n in _listed(steps.out, year) if not (staging / n).is_file()]
        if missing:
            raise DataError(f"{archive.name} lacks {len(missing)} image(s) the JSON files list, e.g. "
                            f"{', '.join(missing[:SHOWN])}: download it again")
        return {"images": written}

    steps.run("annotations", annotations)
    steps.run("images", images)
