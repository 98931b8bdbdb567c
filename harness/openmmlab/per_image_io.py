"""Each validation image's areas, kept beside a run's metrics so that every mIoU cell gets a
bootstrap over the images (harness.per_image, kind ``areas``)."""
from __future__ import annotations

import json
from pathlib import Path

PER_IMAGE_FILE = "per_image.json"


def per_image_path(csv_path: Path) -> Path:
    """Where a run's last validation keeps its per-image areas: beside its per-class CSV."""
    return Path(csv_path).with_name(PER_IMAGE_FILE)


def write_per_image(path: Path, results: list) -> None:
    """The ``areas`` block of one validation: per image (in the dataset's order: mmengine's
    collect_results gathers the ranks' shares back into it) mmseg's intersection, union and label
    areas per class, whose sums over the images are what IoUMetric turns into mIoU (a class with an
    empty union left out of the mean), aAcc and mAcc (a class without ground-truth pixels left out)."""
    import numpy as np

    from harness.io_utils import atomic_write_json
    from harness.per_image import areas_block

    # mmseg's areas are float32 histograms of pixel counts: whole numbers, exact below 2**24 per image
    inter, union, label = (np.rint(np.stack([r[i].cpu().numpy() for r in results])).astype(np.int64)
                           for i in (0, 1, 3))
    atomic_write_json(path, areas_block(inter, union, label, count_absent_classes=False, extra_terms=0,
                                        accuracy_metric="aAcc", class_accuracy_metric="mAcc"))


def read_per_image_file(path: str | Path | None) -> dict | None:
    """The block a run's last validation wrote, or None when there is none (a run made before
    the file was kept) or it cannot be read."""
    if not path:
        return None
    try:
        block = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None
    return block if isinstance(block, dict) else None
