"""Readers for the official layouts.

- revisited Oxford / Paris (revisitop ``python/dataset.py``): ``<root>/roxford5k/jpg/*.jpg`` and
  ``<root>/roxford5k/gnd_roxford5k.pkl`` (same for ``rparis6k``); the pickle holds ``imlist``
  (database names), ``qimlist`` (query names) and ``gnd`` (per query ``bbx``, ``easy``,
  ``hard``, ``junk``: indices into ``imlist``). Splits: ``query`` and ``database``.
- Copydays as DINO's ``eval_copy_detection.py`` (CopydaysDataset) reads it: ``<root>/original``,
  ``<root>/strong``, ``<root>/jpegqual/<q>``, ``<root>/crops/<c>`` of ``.jpg`` files.
- a folder of distractor (or whitening) images: revisitop1m's ``revisitop1m.txt`` list under the
  folder when present, else every image file in it, sorted.
"""
from __future__ import annotations

import os
import pickle
from pathlib import Path

from harness.config import fingerprint as _fingerprint
from harness.data.io import files_stamp, image_size, load_rgb
from harness.errors import DataError
from harness.registry import register_dataset

# eval_copy_detection.py is_image_file
IMAGE_EXTS = ("jpg", "jpeg", "png", "ppm", "bmp", "pgm", "tif", "tiff", "webp")


class ImageList:
    """An ImageSource over explicit files, named relative to ``root`` in the fingerprint;
    ``boxes`` (optional, per image ``(x0, y0, x1, y1)``) crops each image as it is loaded."""

    def __init__(self, root: Path, paths: list[Path], name: str, boxes: list | None = None):
        self.root, self.paths, self.name, self.boxes = Path(root), list(paths), name, boxes

    def __len__(self) -> int:
        return len(self.paths)

    def load_image(self, i: int):
        img = load_rgb(self.paths[i])
        if self.boxes is not None:  # revisitop example_process_images.py: qim.crop(bbx)
            img = img.crop(tuple(self.boxes[i]))
        return img

    def fingerprint(self) -> str:
        return _fingerprint({"dataset": self.name, "boxes": self.boxes,
                             "images": [_rel(p, self.root) for p in self.paths]})

    def content_stamp(self) -> str:
        return files_stamp(self.paths)


def _rel(p: Path, root: Path) -> str:
    try:
        return p.relative_to(root).as_posix()
    except ValueError:
        return p.name


def _missing(paths: list[Path]) -> list[Path]:
    return [p for p in paths if not p.is_file()]


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
        missing = _missing(paths)
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


def image_folder(folder: Path, limit: int | None, what: str) -> list[Path]:
    """The images of a distractor / whitening folder: ``revisitop1m.txt``'s list (revisitop
    dataset.py: names relative to ``jpg/``) when present, else the image files in it, sorted
    (eval_copy_detection.py lists them with os.listdir, in no stated order); the first ``limit``."""
    folder = Path(folder)
    if not folder.is_dir():
        raise DataError(f"{what} folder {folder} not found")
    listing = folder / "revisitop1m.txt"
    if listing.is_file():
        names = [ln.strip() for ln in listing.read_text().splitlines() if ln.strip()]
        paths = [folder / "jpg" / n for n in names]
    else:
        paths = [folder / n for n in sorted(os.listdir(folder)) if n.split(".")[-1] in IMAGE_EXTS]
    paths = paths[:limit] if limit is not None else paths
    if not paths:
        raise DataError(f"{what} folder {folder} holds no image ({', '.join(IMAGE_EXTS)})")
    missing = _missing(paths)
    if missing:
        raise DataError(f"{what}: {len(missing)} listed images are missing, e.g. {missing[0]}")
    if limit is not None and len(paths) < limit:
        raise DataError(f"{what} folder {folder} holds {len(paths)} images, fewer than the {limit} asked for")
    return paths
