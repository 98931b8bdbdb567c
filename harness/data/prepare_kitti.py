"""KITTI depth, Eigen split, from the official downloads to Monocular-Depth-Estimation-Toolbox's
layout (docs/dataset_prepare.md, KITTI: the raw data and the annotated depth maps unzipped into
``input/`` and ``gt_depth/``, the ``kitti_eigen_*`` split files copied beside them), which the
``kitti`` reader reads. The download folder holds:

- the raw drives as cvlibs.net's raw_data_downloader.sh fetches them, ``<date>_drive_<NNNN>_sync.zip``
  (members ``<date>/<date>_drive_<NNNN>_sync/image_02/data/<frame>.png``, ...): every drive the split
  files name must be there;
- ``data_depth_annotated.zip`` (members ``train|val/<drive>_sync/proj_depth/groundtruth/image_0[23]/
  <frame>.png``);
- the toolbox's ``kitti_eigen_train.txt`` and ``kitti_eigen_test.txt`` (its splits/ folder).

Written: ``input/<date>/<drive>_sync/image_0[23]/...`` (the two colour cameras: the split files name
image_02 frames; the grey cameras, LiDAR scans and OXTS of the drive zips are not read by any
reader and are left out), ``gt_depth/<drive>_sync/...`` (the train and val folders of the depth
archive merged, as the toolbox's "few cut operations" do), the two split files. One step per drive
zip, one for the depth maps, one for the split files: an interrupted run resumes at its zip.
"""
from __future__ import annotations

import shutil
import zipfile
from pathlib import Path, PurePosixPath

from harness.data.prepare import Steps, require
from harness.errors import DataError

SPLIT_FILES = ("kitti_eigen_train.txt", "kitti_eigen_test.txt")
DEPTH_ZIP = "data_depth_annotated.zip"
CAMERAS = ("image_02", "image_03")
SHOWN = 3


def named_drives(split_files: list[Path]) -> list[str]:
    """The drives (``<date>_drive_<NNNN>_sync``) whose frames the split files list."""
    drives = set()
    for path in split_files:
        for line in path.read_text().splitlines():
            parts = line.split()
            if len(parts) != 3 or len(PurePosixPath(parts[0]).parts) < 2:
                if parts:
                    raise DataError(f"{path}: line '{line.strip()}' is not '<rgb> <depth> <focal>': not the "
                                    f"toolbox's split file")
                continue
            drives.add(PurePosixPath(parts[0]).parts[1])
    return sorted(drives)


def unzip(archive: Path, into: Path, keep) -> int:
    """Extract the members of ``archive`` for which ``keep(parts)`` gives a relative path; the number
    written. Member names are never trusted as paths (no absolute ones, no '..')."""
    written = 0
    try:
        with zipfile.ZipFile(archive) as zf:
            for info in zf.infolist():
                parts = PurePosixPath(info.filename).parts
                if info.is_dir() or not parts or ".." in parts or parts[0] == "/":
                    continue
                target = keep(parts)
                if target is None:
                    continue
                dst = into.joinpath(*target)
                dst.parent.mkdir(parents=True, exist_ok=True)
                with zf.open(info) as src, open(dst, "wb") as out:
                    shutil.copyfileobj(src, out)
                written += 1
    except (zipfile.BadZipFile, EOFError, OSError) as exc:
        raise DataError(f"{archive} cannot be extracted ({exc}): a truncated or damaged download; "
                        f"download it again") from None
    return written


def _drive_step(archive: Path, drive: str):
    def make(staging: Path) -> dict:
        def keep(parts):  # <date>/<drive>/image_0[23]/...
            return ("input", *parts) if len(parts) > 3 and parts[1] == drive and parts[2] in CAMERAS else None

        frames = unzip(archive, staging, keep)
        if not frames:
            raise DataError(f"{archive} holds no {drive}/image_02 frames: not the official drive zip")
        return {"frames": frames}
    return make


def _depth_step(archive: Path):
    def make(staging: Path) -> dict:
        def keep(parts):  # train|val/<drive>/proj_depth/groundtruth/image_0[23]/<frame>.png
            return ("gt_depth", *parts[1:]) if len(parts) > 2 and parts[0] in ("train", "val") else None

        maps = unzip(archive, staging, keep)
        if not maps:
            raise DataError(f"{archive} holds no train/ or val/ depth maps: not the official {DEPTH_ZIP}")
        return {"depth maps": maps}
    return make


def prepare(steps: Steps) -> None:
    split_files = require(steps.download, *SPLIT_FILES)
    drives = named_drives(split_files)
    zips = {d: steps.download / f"{d}.zip" for d in drives}
    absent = [p.name for p in zips.values() if not p.is_file()]
    if absent:
        raise DataError(f"{steps.download} lacks {len(absent)} of the {len(drives)} raw drive zips the split files "
                        f"name, e.g. {', '.join(absent[:SHOWN])} (cvlibs.net's raw_data_downloader.sh fetches them)")
    depth_zip = require(steps.download, DEPTH_ZIP)[0]
    for drive, archive in zips.items():
        steps.run(f"drive-{drive}", _drive_step(archive, drive))
    steps.run("depth", _depth_step(depth_zip))

    def copy_splits(staging: Path) -> dict:
        for path in split_files:
            shutil.copyfile(path, staging / path.name)
        return {"split files": len(split_files)}

    steps.run("splits", copy_splits)
