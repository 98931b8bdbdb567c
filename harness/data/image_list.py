"""Images named one by one, as the retrieval data sets list them: an image source over explicit
files (optionally cropped by a box each), and the images of a distractor or whitening folder
(revisitop1m's ``revisitop1m.txt`` list under the folder when present, else every image file in
it, sorted)."""
from __future__ import annotations

import os
from pathlib import Path

from harness.config import fingerprint as _fingerprint
from harness.data.io import files_stamp, load_rgb
from harness.errors import DataError

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


def missing_files(paths: list[Path]) -> list[Path]:
    return [p for p in paths if not p.is_file()]


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
    missing = missing_files(paths)
    if missing:
        raise DataError(f"{what}: {len(missing)} listed images are missing, e.g. {missing[0]}")
    if limit is not None and len(paths) < limit:
        raise DataError(f"{what} folder {folder} holds {len(paths)} images, fewer than the {limit} asked for")
    return paths
