"""ImageNet-ReaL's labels (google-research/reassessed-imagenet ``real.json``), read once for every
user: entry i lists the valid labels of ``ILSVRC2012_val_{i+1:08d}.JPEG`` as class indices (positions
in the sorted wnids, the ImageFolder order); an empty list is an image the raters kept no label for."""
from __future__ import annotations

import json
import re
from pathlib import Path

from harness.errors import DataError

_VAL_NAME = re.compile(r"ILSVRC2012_val_(\d{8})")


def read_real(path: Path) -> list[list[int]]:
    """The label lists of real.json; a missing file, or one that is not a list of lists of class
    indices, is a DataError."""
    if not path.is_file():
        raise DataError(f"ImageNet-ReaL labels {path} not found; expected real.json of google-research/"
                        f"reassessed-imagenet")
    try:
        labels = json.loads(path.read_text())
    except (ValueError, UnicodeDecodeError) as exc:
        raise DataError(f"{path} is not JSON ({exc}); expected ReaL's real.json (a list of label lists)") from None
    if not isinstance(labels, list) or not all(isinstance(x, list) and all(isinstance(k, int) for k in x)
                                               for x in labels):
        raise DataError(f"{path} is not a list of lists of class indices (ReaL's real.json)")
    return labels


def real_label_sets(image_paths: list[Path], labels: list[list[int]], where: str) -> list[list[int]]:
    """The ReaL label list of each validation image, found by its file name's number."""
    out = []
    for p in image_paths:
        m = _VAL_NAME.search(p.name)
        if not m:
            raise DataError(f"{where}: {p.name} is not an ILSVRC2012_val_NNNNNNNN file; ReaL labels are "
                            f"matched by that number")
        k = int(m.group(1)) - 1
        if not 0 <= k < len(labels):
            raise DataError(f"{where}: {p.name} has no entry in real.json ({len(labels)} entries)")
        out.append(labels[k])
    return out
