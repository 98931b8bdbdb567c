"""NAVI v1 (github.com/google/navi: ``navi_v1.tar.gz``, or that archive extracted) to the layout
Probe3D reads (the ``navi`` pairs reader and the ``navi:probe3d`` layout): the release's tree
``<object>/<multiview_*|wild_set>/{annotations.json, images/<id>.jpg, depth/<id>.png, masks/<id>.png}``
with, beside each image and depth map, the ``downsampled_<id>`` copy that Probe3D's
data_processing/resize_navi.py writes in place (mbanani/probe3d @ a1f1464):

- each ``images/*.jpg`` and ``depth/*.png`` not already named ``downsampled_*`` is opened, turned
  upright by its EXIF orientation (``ImageOps.exif_transpose``), and resized so that its short side
  is 1024, each side ``int(side x 1024 / short side)``; images with PIL's filter 2 (bilinear: the
  script's docstring says bicubic, but PIL reads 2 as BILINEAR, and that is what ran), depth maps
  with filter 0 (nearest, so disparities are never blended); saved with PIL's defaults (JPEG quality
  75; the 16-bit PNG stays 16-bit);
- masks, annotations.json and the 3D scans are not changed.

The download is never written into: from the archive, the tree is extracted into ``out`` first
(step ``extract``); from an extracted tree, the files are hard-linked into ``out`` (copied across file
systems). Then one step per object, so an interrupted run resumes at the object it was in.
"""
from __future__ import annotations

import json
from pathlib import Path

from harness.data import archives
from harness.data.prepare import Steps
from harness.errors import DataError
from harness.io_utils import link_or_copy

ARCHIVES = ("navi_v1.tar.gz", "navi_v1.tar")
TREE = "navi_v1"
SHORT_SIDE = 1024
PREFIX = "downsampled_"
# (folder, suffix, PIL filter): 2 is Image.Resampling.BILINEAR, 0 NEAREST, the numbers the script passes
RESIZED = (("images", ".jpg", 2), ("depth", ".png", 0))
CARRIED = ("images", "depth", "masks")


def _collections(obj: Path) -> list[Path]:
    return sorted(obj.glob("multiview_*")) + sorted(obj.glob("wild_set"))


def _objects(tree: Path) -> list[Path]:
    return sorted(p for p in tree.iterdir() if p.is_dir() and not p.name.startswith(".") and _collections(p))


def downsample(src: Path, dst: Path, resample: int) -> None:
    """``src`` upright and resized to short side 1024 into ``dst`` (resize_navi.py's resize_image)."""
    from PIL import Image, ImageOps, UnidentifiedImageError

    try:
        with Image.open(src) as im:
            upright = ImageOps.exif_transpose(im)
            w, h = upright.size
            factor = float(SHORT_SIDE) / min(w, h)
            upright.resize((int(w * factor), int(h * factor)), resample).save(dst)
    except (OSError, ValueError, SyntaxError, UnidentifiedImageError) as exc:
        dst.unlink(missing_ok=True)
        raise DataError(f"cannot read NAVI file {src} ({exc}): a truncated or damaged download; "
                        f"extract navi_v1.tar.gz again") from None


def _link(src: Path, dst: Path) -> None:
    dst.parent.mkdir(parents=True, exist_ok=True)
    link_or_copy(src, dst)


def _check_collection(folder: Path) -> None:
    ann = folder / "annotations.json"
    if not ann.is_file() or not (folder / "images").is_dir():
        raise DataError(f"{folder} lacks {'annotations.json' if not ann.is_file() else 'images/'} (every "
                        f"collection of the navi_v1 archive has annotations.json, images/, depth/, masks/): "
                        f"not the official download, or an incomplete extraction")
    try:
        entries = json.loads(ann.read_text())
        [e["filename"] for e in entries]
    except (OSError, ValueError, TypeError, KeyError) as exc:
        raise DataError(f"cannot read {ann} ({exc}): not NAVI's annotations.json (a list of views with "
                        f"'filename' and 'camera')") from None


def _object_step(obj: Path, carry: bool):
    """The step that writes object ``obj``'s downsampled files (and, with ``carry``, its originals)."""
    def make(staging: Path) -> dict:
        counts = {"images": 0, "depth": 0}
        for folder in _collections(obj):
            _check_collection(folder)
            target = staging / obj.name / folder.name
            target.mkdir(parents=True)
            if carry:
                _link(folder / "annotations.json", target / "annotations.json")
                for sub in CARRIED:
                    for f in sorted((folder / sub).glob("*")) if (folder / sub).is_dir() else ():
                        if f.is_file() and not f.name.startswith(PREFIX):
                            _link(f, target / sub / f.name)
            for sub, suffix, resample in RESIZED:
                (target / sub).mkdir(exist_ok=True)
                for f in sorted((folder / sub).glob(f"*{suffix}")) if (folder / sub).is_dir() else ():
                    if not f.name.startswith(PREFIX):
                        downsample(f, target / sub / f"{PREFIX}{f.name}", resample)
                        counts[sub] += 1
        return counts
    return make


def _source_tree(steps: Steps) -> tuple[Path, bool]:
    """(the tree to read, whether its files must be carried into ``out``)."""
    archive = next((steps.download / a for a in ARCHIVES if (steps.download / a).is_file()), None)
    if archive is None:
        tree = steps.download / TREE if (steps.download / TREE).is_dir() else steps.download
        if not _objects(tree):
            raise DataError(f"{steps.download} holds neither {ARCHIVES[0]} nor its extracted {TREE}/ tree "
                            f"(<object>/<multiview_*|wild_set>/): `ssl-bench data list navi` says where it comes from")
        return tree, True

    def extract(staging: Path) -> dict:
        files = archives.extract(archive, staging)
        inner = staging / TREE
        if inner.is_dir():  # the archive's members start with navi_v1/: the objects go to out's top level
            archives.lift(inner, staging)
        return {"files": files}

    steps.run("extract", extract)
    return steps.out, False


def prepare(steps: Steps) -> None:
    tree, carry = _source_tree(steps)
    objects = _objects(tree)
    if not objects:
        raise DataError(f"{tree} has no <object>/<multiview_*|wild_set>/ folders: not the navi_v1 archive")
    for obj in objects:
        steps.run(f"navi-{obj.name}", _object_step(obj, carry))
