"""What a record's per-image statistics cost under Hungarian matching (harness.per_image, kind
``confusion``): the size of the block in the record and the time of the 95% bootstrap interval
(1000 resamples, every one matched anew), on synthetic sparse confusion matrices shaped like the
validation sets of VOC and ADE20K.

    python -m experiments.per_image_cost

Each image holds a few ground-truth classes (3 on VOC, 9 on ADE20K), each predicted as 4 classes
with 100 to 20,000 pixels apiece (numpy seed 0): about the sparsity of real segmentations, which
is what the zlib-compressed block size depends on.
"""
from __future__ import annotations

import argparse
import json
import time

import numpy as np

from harness.per_image import confusion_block, read_per_image
from harness.results import bootstrap

SETS = {"VOC": (1449, 21, 22, 3), "ADE20K": (2000, 150, 151, 9)}  # images, classes, predicted, per image


def sparse_matrices(images: int, classes: int, predicted: int, present: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    m = np.zeros((images, classes, predicted), dtype=np.int64)
    for i in range(images):
        for c in rng.choice(classes, present, replace=False):
            m[i, c, rng.choice(predicted, 4, replace=False)] = rng.integers(100, 20000, 4)
    return m


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sets", nargs="+", default=list(SETS), choices=list(SETS))
    args = p.parse_args(argv)
    for name in args.sets:
        n, g, k, present = SETS[name]
        block = confusion_block(sparse_matrices(n, g, k, present), hungarian=True, count_absent_classes=False,
                                extra_terms=0)
        size = len(json.dumps(block))
        t0 = time.perf_counter()
        ci = bootstrap.intervals(read_per_image(block), ["mIoU"])["mIoU"]
        seconds = time.perf_counter() - t0
        print(f"{name}: {n} images x {g} x {k}: block {size / 1e3:.0f} kB in the record, "
              f"{bootstrap.RESAMPLES} resamples {seconds:.1f} s (interval {ci.low:.2f} - {ci.high:.2f})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
