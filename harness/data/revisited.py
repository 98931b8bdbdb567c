"""The revisited Oxford and Paris data sets (keys ``roxford5k`` and ``rparis6k``, one reader for
both: the revisitop release).

- revisited Oxford / Paris (revisitop ``python/dataset.py``): ``<root>/roxford5k/jpg/*.jpg`` and
  ``<root>/roxford5k/gnd_roxford5k.pkl`` (same for ``rparis6k``); the pickle holds ``imlist``
  (database names), ``qimlist`` (query names) and ``gnd`` (per query ``bbx``, ``easy``,
  ``hard``, ``junk``: indices into ``imlist``). Splits: ``query`` and ``database``.
"""
from __future__ import annotations

import pickle
from pathlib import Path

from harness.data.image_list import ImageList, missing_files
from harness.data.io import files_stamp, image_size
from harness.errors import DataError
from harness.registry import register_dataset


class RevisitedDataset:
    """One of revisitop's datasets; ``root`` holds ``<name>/`` (the official ``--data_path``)
    or is that folder. ``split``: ``query`` or ``database``; ``crop_queries`` crops the
    queries by their ``bbx`` (revisitop's protocol; DINO's script does not)."""

    name = "?"
    SPLITS = ("query", "database")

    def __init__(self, root: str | Path, split: str = "database", crop_queries: bool = False):
        if split not in self.SPLITS:
            raise DataError(f"{self.name} split {split!r} is unknown; choose query or database")
        root = Path(root)
        self.folder = root if (root / f"gnd_{self.name}.pkl").is_file() else root / self.name
        self.split = split
        self.cfg = _load_gnd(self.folder / f"gnd_{self.name}.pkl", self.name)
        images = self.folder / "jpg"
        names = self.cfg["qimlist"] if split == "query" else self.cfg["imlist"]
        paths = [images / f"{n}.jpg" for n in names]
        missing = missing_files(paths)
        if missing:
            raise DataError(f"{len(missing)} of the {len(paths)} {split} images listed in "
                            f"gnd_{self.name}.pkl are missing, e.g. {missing[0]}; the ground truth does not "
                            f"match the images (download {self.name}'s jpg/ as revisitop's download.py does)")
        boxes = [list(map(float, g["bbx"])) for g in self.cfg["gnd"]] if split == "query" else None
        if boxes is not None:
            _check_boxes(paths, boxes, self.name)
        self.source = ImageList(self.folder, paths, f"{self.name}/{split}",
                                boxes if crop_queries else None)

    @property
    def gnd(self) -> list[dict]:
        return self.cfg["gnd"]

    def __len__(self) -> int:
        return len(self.source)

    def load_image(self, i: int):
        return self.source.load_image(i)

    def fingerprint(self) -> str:
        return self.source.fingerprint()

    def content_stamp(self) -> str:
        return files_stamp([*self.source.paths, self.folder / f"gnd_{self.name}.pkl"])


def _load_gnd(path: Path, name: str) -> dict:
    if not path.is_file():
        raise DataError(f"ground-truth file {path} not found; the revisitop layout is "
                        f"<root>/{name}/gnd_{name}.pkl with the images in <root>/{name}/jpg/")
    try:
        with open(path, "rb") as f:
            cfg = pickle.load(f)
    except Exception as exc:  # noqa: BLE001 - any unpickling failure is a bad file
        raise DataError(f"cannot read ground-truth file {path}: {type(exc).__name__}: {exc}") from None
    if not isinstance(cfg, dict) or not {"imlist", "qimlist", "gnd"} <= set(cfg):
        raise DataError(f"ground-truth file {path} lacks imlist, qimlist or gnd; not a revisitop gnd pickle")
    n, nq = len(cfg["imlist"]), len(cfg["qimlist"])
    if len(cfg["gnd"]) != nq:
        raise DataError(f"{path}: {len(cfg['gnd'])} gnd entries for {nq} query images; the ground truth "
                        "does not match its query list")
    for q, g in enumerate(cfg["gnd"]):
        for key in ("easy", "hard", "junk", "bbx"):
            if key not in g:
                raise DataError(f"{path}: query {q} ({cfg['qimlist'][q]}) has no {key!r} entry")
        bad = [int(i) for key in ("easy", "hard", "junk") for i in g[key] if not 0 <= int(i) < n]
        if bad:
            raise DataError(f"{path}: query {q} ({cfg['qimlist'][q]}) names database image {bad[0]}, "
                            f"outside the {n} images of imlist; the ground truth does not match the images")
    return cfg


def _check_boxes(paths: list[Path], boxes: list, name: str) -> None:
    for p, (x0, y0, x1, y1) in zip(paths, boxes):
        w, h = image_size(p)
        if not (0 <= x0 < x1 <= w and 0 <= y0 < y1 <= h):
            raise DataError(f"{name}: query box ({x0:g}, {y0:g}, {x1:g}, {y1:g}) of {p.name} lies outside "
                            f"the {w}x{h} image; the ground truth does not match the images")


@register_dataset("roxford5k")
class RevisitedOxford(RevisitedDataset):
    name = "roxford5k"


@register_dataset("rparis6k")
class RevisitedParis(RevisitedDataset):
    name = "rparis6k"
