"""SUN397 from its official files (``SUN397.tar.gz``, checked against the md5 torchvision's ``SUN397``
records, and ``Partitions.zip``) to the layout the ``sun397`` reader reads (SynCLR's
downstreams/sun397.py): the archive's ``SUN397/`` folder as the root, ``<root>/<letter>/<class>/...``
with ``ClassName.txt`` (the archive's, else the partition's), ``Training_01.txt`` and
``Testing_01.txt`` beside it. Every image the two partition files name must be in the archive; the
counts (19,850 each in 397 classes) are ``data check``'s."""
from __future__ import annotations

from pathlib import Path

from harness.data import archives
from harness.data.prepare import Steps, require
from harness.errors import DataError

ARCHIVE, PARTITIONS = "SUN397.tar.gz", "Partitions.zip"
LISTS = ("Training_01.txt", "Testing_01.txt")
SHOWN = 3


def prepare(steps: Steps) -> None:
    from torchvision.datasets import SUN397

    archive, partitions = require(steps.download, ARCHIVE, PARTITIONS)

    def convert(staging: Path) -> dict:
        archives.verify_md5(archive, SUN397._DATASET_MD5)
        unpacked = staging / ".archive"  # dot-named: never moved into out
        images = archives.extract(archive, unpacked)
        if not (unpacked / "SUN397").is_dir():
            raise DataError(f"{archive} has no SUN397/ folder: not the official archive")
        archives.lift(unpacked / "SUN397", staging)
        names = LISTS if (staging / "ClassName.txt").is_file() else ("ClassName.txt", *LISTS)
        for name in names:
            archives.zip_member(partitions, name, staging)
        for name in LISTS:
            listed = [ln.strip() for ln in (staging / name).read_text().splitlines() if ln.strip()]
            missing = [p for p in listed if not (staging / p.lstrip("/")).is_file()]
            if missing:
                raise DataError(f"{archive.name} lacks {len(missing)} image(s) that {name} names, e.g. "
                                f"{', '.join(missing[:SHOWN])}: download it again")
        return {"files": images}

    steps.run("sun397", convert)
