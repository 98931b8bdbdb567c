"""Oxford Flowers-102 from its official files (``102flowers.tgz``, ``imagelabels.mat``,
``setid.mat``, each checked against the md5 torchvision's ``Flowers102`` records) to
``<root>/flowers-102/{jpg/image_NNNNN.jpg, imagelabels.mat, setid.mat}``: torchvision's layout, which
the ``flowers`` reader (SynCLR's three splits) and the ``flowers:ibot`` layout (iBOT's trainval) both
read. The split sizes (train 1,020, val 1,020, test 6,149 in 102 classes) are ``data check``'s; here
every image id that setid.mat names must be in the archive."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from harness.data import archives
from harness.data.prepare import Steps, require
from harness.errors import DataError

FOLDER = "flowers-102"


def _named_ids(setid: Path) -> set[int]:
    from scipy.io import loadmat

    mat = loadmat(setid, squeeze_me=True)
    missing = [k for k in ("trnid", "valid", "tstid") if k not in mat]
    if missing:
        raise DataError(f"{setid} has no {', '.join(missing)}: not the official setid.mat")
    return {int(i) for k in ("trnid", "valid", "tstid") for i in np.atleast_1d(mat[k])}


def prepare(steps: Steps) -> None:
    from torchvision.datasets import Flowers102

    files = dict(Flowers102._file_dict.values())  # file name -> md5
    paths = require(steps.download, *files)

    def convert(staging: Path) -> dict:
        for path in paths:
            archives.verify_md5(path, files[path.name])
        base = staging / FOLDER
        images = archives.extract(paths[0], base)
        for path in paths[1:]:
            archives.place(path, path.name, base)
        named = _named_ids(base / "setid.mat")
        absent = sorted(i for i in named if not (base / "jpg" / f"image_{i:05d}.jpg").is_file())
        if absent:
            raise DataError(f"{paths[0].name} lacks {len(absent)} image(s) that setid.mat names, e.g. "
                            f"image_{absent[0]:05d}.jpg: download it again")
        return {"images": images}

    steps.run("flowers", convert)
