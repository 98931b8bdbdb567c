"""Regenerate tests/fixtures/official_split_readers.json from the official iBOT transfer readers.

Runs bytedance/ibot evaluation/eval_cls.py's ``INatDataset`` (2018 and 2019, category "name"),
``CarsDataset`` and ``FlwrsDataset`` unmodified, and torchvision's ``CIFAR10`` / ``CIFAR100`` (what
eval_cls.py's ``build_dataset`` calls; their md5 check of the real archives switched off) on the tiny
data sets tests/official_split_fixtures.py writes in the official formats, and records each split's
samples (path relative to the root, label), the number of classes the official code sizes the head
by, and for CIFAR the sha256 of the decoded pixel array.
"""
from __future__ import annotations

import hashlib
import tempfile
from pathlib import Path

import common

REPOSITORY = "https://github.com/bytedance/ibot"
COMMIT = "da316d82636a7a7356835ef224b13d5f3ace0489"
FIXTURE = "official_split_readers.json"
SEED = 0  # of the fixture writers


def _samples(ds, root: Path) -> list:
    return [[Path(p).resolve().relative_to(root.resolve()).as_posix(), int(t)] for p, t in ds.samples]


def _official_cases(eval_cls, root: Path) -> dict:
    from official_split_fixtures import write_cars, write_flowers, write_inat

    out = {}
    for year in (2018, 2019):
        base = write_inat(root / f"inat{year}", year, seed=SEED)
        for split, train in (("train", True), ("val", False)):
            ds = eval_cls.INatDataset(str(base), train=train, year=year, category="name")
            out[f"inat{year}/{split}"] = {"samples": _samples(ds, base), "nb_classes": ds.nb_classes}
    base = write_cars(root / "cars", seed=SEED)
    for split, train in (("train", True), ("test", False)):
        ds = eval_cls.CarsDataset(str(base), train=train)
        out[f"cars_annos/{split}"] = {"samples": _samples(ds, base), "nb_classes": ds.nb_classes}
    base = write_flowers(root / "flwrs", seed=SEED)
    for split, train in (("trainval", True), ("test", False)):
        ds = eval_cls.FlwrsDataset(str(base), train=train)
        out[f"flowers102/{split}"] = {"samples": _samples(ds, base), "nb_classes": ds.nb_classes}
    return out


def _cifar_cases(root: Path) -> dict:
    from official_split_fixtures import write_cifar10, write_cifar100
    from torchvision import datasets

    out = {}
    for name, writer, cls in (("cifar10", write_cifar10, datasets.CIFAR10), ("cifar100", write_cifar100,
                                                                             datasets.CIFAR100)):
        base = writer(root / name, seed=SEED)
        # the md5 sums are the real archives': the fixture's files are only checked to exist
        unchecked = type(f"Unchecked{cls.__name__}", (cls,), {"_check_integrity": lambda self: True,
                                                               "meta": {**cls.meta, "md5": None}})
        for split, train in (("train", True), ("test", False)):
            ds = unchecked(str(base), train=train, download=False)
            out[f"{name}/{split}"] = {"targets": [int(t) for t in ds.targets], "classes": list(ds.classes),
                                      "pixels_sha256": hashlib.sha256(ds.data.tobytes()).hexdigest(),
                                      "shape": list(ds.data.shape)}
    return out


def main() -> None:
    args = common.parse_args(__doc__, FIXTURE, REPOSITORY, COMMIT)
    import torchvision

    eval_cls = common.import_official(args.official, "evaluation.eval_cls")
    root = Path(tempfile.mkdtemp(prefix="ssl-bench-official-splits-"))
    cases = {**_official_cases(eval_cls, root), **_cifar_cases(root)}
    how = (f"bytedance/ibot@{args.commit} evaluation/eval_cls.py INatDataset(year, category='name'), CarsDataset, "
           "FlwrsDataset, unmodified, and torchvision CIFAR10 / CIFAR100 (eval_cls.py's build_dataset) with "
           "_check_integrity returning True and meta's md5 None, on tests/official_split_fixtures.py's data sets "
           "(seed 0). samples: (path relative to the data root, label); nb_classes: the official head size; "
           "CIFAR: targets, classes and the sha256 of the (N, 32, 32, 3) uint8 pixel array.")
    data = {
        "provenance": common.provenance(
            args, __file__, {"writer_seed": SEED, "inat_category": "name", "years": [2018, 2019]},
            ["evaluation/eval_cls.py"], extra_modules=("torchvision",),
            notes=f"torchvision {torchvision.__version__} reads the CIFAR pickles"),
        "how": how,
        "cases": cases,
    }
    common.finish(args, data)


if __name__ == "__main__":
    main()
