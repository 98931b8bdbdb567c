"""Regenerate benchmarks/robustness/fixtures/robustness_mce_alexnet.json from the AugMix ImageNet code.

Runs google-research/augmix imagenet.py ``compute_mce(corruption_accs)`` unmodified: the mCE of
Hendrycks & Dietterich (2019), each corruption's error averaged over the five severities and
divided by AlexNet's (``ALEXNET_ERR``), averaged over the 15 corruptions. The inputs are seeded
accuracy tables (per corruption, five accuracies on a 1/1000 grid: exact decimals), as test_c
builds them. The module parses its command line at import: it is imported with two placeholder
data folders as its positional arguments (nothing is read from them).
"""
from __future__ import annotations

import sys

import importlib.util  # noqa: E402
from pathlib import Path  # noqa: E402

# tests/reference/common.py (the generators' command line and provenance) by its path: a generator runs as a
# script from its folder, and a site-packages ``tests`` package can shadow tests/ by name
_COMMON = importlib.util.spec_from_file_location(
    "common", Path(__file__).resolve().parents[3] / "tests" / "reference" / "common.py")
common = importlib.util.module_from_spec(_COMMON)
_COMMON.loader.exec_module(common)  # puts the repository root and tests/ on the import path
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"  # this folder's fixtures

REPOSITORY = "https://github.com/google-research/augmix"
COMMIT = "9b9824c7c19bf7e72df2d085d97b99b3bfb00ba4"
FIXTURE = "robustness_mce_alexnet.json"
SEED = 15
N_TABLES = 6


def main() -> None:
    args = common.parse_args(__doc__, FIXTURE, REPOSITORY, COMMIT, fixtures=FIXTURES)
    import numpy as np

    argv, sys.argv = sys.argv, ["imagenet.py", "/nonexistent/clean", "/nonexistent/corrupted"]
    try:
        official = common.import_official(args.official, "imagenet")
    finally:
        sys.argv = argv
    rng = np.random.default_rng(SEED)
    tables = []
    for _ in range(N_TABLES):
        accs = {c: (rng.integers(0, 1001, 5) / 1000).tolist() for c in official.CORRUPTIONS}
        tables.append({"accuracies": accs, "mCE": float(official.compute_mce(accs))})
    out = {"provenance": common.provenance(args, __file__, {"seed": SEED, "n_tables": N_TABLES},
                                           ["imagenet.py", "augmentations.py"], extra_modules=("torchvision",)),
           "how": "compute_mce on seeded tables of accuracies k/1000 (five severities per corruption)",
           "corruptions": list(official.CORRUPTIONS), "alexnet_err": list(official.ALEXNET_ERR), "tables": tables}
    common.finish(args, out)


if __name__ == "__main__":
    main()
