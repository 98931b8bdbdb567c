"""Image and label-map loading shared by every dataset reader.

Readers go through these two functions so that a corrupt or truncated file always
surfaces as a :class:`DataError` naming the file, instead of a bare PIL exception
deep inside a DataLoader worker.
"""
from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import numpy as np
from PIL import Image

from harness.errors import DataError

# Extensions accepted for images (compared lower-case), as in the brief for ImageFolder.
IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png")

# Pascal VOC ignore label; the SynthScenes generator never writes it.
IGNORE_INDEX = 255


# EXIF orientation (tag 0x0112) values other than 1 ask a viewer to rotate or mirror the pixels.
EXIF_ORIENTATION = 0x0112


def load_rgb(path: str | Path, refuse_rotated: bool = False) -> Image.Image:
    """Open an image as RGB; any decoding problem becomes a DataError naming the file.

    EXIF orientation is never applied, as PIL (and the official DINO / open-hummingbird-eval
    loaders) leave it: the stored pixel grid is the image. With ``refuse_rotated`` (images whose
    label maps must line up pixel for pixel) an orientation other than 1 is an error, since the
    mask may have been drawn on either the stored or the rotated picture."""
    path = Path(path)
    try:
        with Image.open(path) as img:
            if refuse_rotated:
                _refuse_rotated(img, path)
            # Image.open is lazy: load() forces the full decode so that a truncated
            # JPEG fails here, not later in a transform.
            img.load()
            return _to_rgb(img, path)
    except DataError:
        raise
    except FileNotFoundError:
        raise DataError(f"image file {path} does not exist; the dataset on disk is incomplete "
                        f"(re-extract or regenerate it)") from None
    except (OSError, ValueError, Image.DecompressionBombError, SyntaxError) as exc:
        raise DataError(f"cannot decode image {path}: {exc}; the file is corrupt or truncated "
                        f"(replace it, or regenerate the dataset)") from exc


def _to_rgb(img: Image.Image, path: Path) -> Image.Image:
    """RGB with 8 bits per channel. 16-bit grayscale is scaled by its high byte, as PIL already
    reads 16-bit RGB and gray-with-alpha PNGs; ``convert("RGB")`` would clip every value above
    255 to white instead."""
    if img.mode.startswith("I;16") or (img.mode == "I" and img.format == "PNG"):
        # 'I' is how older PIL versions open 16-bit grayscale PNGs
        values = np.asarray(img).astype(np.int64)
        if values.min() < 0 or values.max() > 0xFFFF:
            raise DataError(f"image {path} (PIL mode {img.mode!r}) holds values outside 0..65535; "
                            f"expected a 16-bit grayscale image. Convert it to an 8-bit PNG or JPEG")
        return Image.fromarray((values >> 8).astype(np.uint8)).convert("RGB")
    if img.mode in ("I", "F") or img.mode.startswith("I;"):
        raise DataError(f"image {path} has PIL mode {img.mode!r} (32-bit integer or float pixels), whose "
                        f"range to 8 bits is not known; expected 8-bit (or 16-bit PNG) images: convert "
                        f"it to an 8-bit PNG or JPEG with the scaling it needs")
    return img.convert("RGB")


def _refuse_rotated(img: Image.Image, path: Path) -> None:
    orientation = img.getexif().get(EXIF_ORIENTATION, 1)
    if orientation != 1:
        raise DataError(f"image {path} carries EXIF orientation {orientation} (rotated or mirrored for "
                        f"display); its label map cannot be known to match the stored pixels. Rewrite the "
                        f"image with the rotation applied to it and its mask (or drop the EXIF tag if "
                        f"the mask matches the stored pixels)")


def image_size(path: str | Path) -> tuple[int, int]:
    """(width, height) of an image file, from its header (no decode)."""
    path = Path(path)
    try:
        with Image.open(path) as img:
            return img.size
    except FileNotFoundError:
        raise DataError(f"image file {path} does not exist; the dataset on disk is incomplete "
                        f"(re-extract or regenerate it)") from None
    except (OSError, ValueError, SyntaxError) as exc:
        raise DataError(f"cannot read image {path}: {exc}; the file is corrupt or truncated") from exc


def load_label_png(path: str | Path) -> np.ndarray:
    """Read a label map stored as palette ('P') or grayscale ('L') PNG -> (H, W) uint8 indices.

    For palette PNGs the stored indices are the labels (Pascal VOC convention); the
    palette colours are never looked at, so a recoloured palette cannot change labels.
    """
    path = Path(path)
    try:
        with Image.open(path) as img:
            img.load()
            if img.mode not in ("P", "L"):
                raise DataError(
                    f"label map {path} has PIL mode {img.mode!r}; expected a palette ('P') or "
                    f"grayscale ('L') PNG whose pixel values are class indices (an RGB-coloured "
                    f"mask must be converted to indices first)")
            return np.array(img, dtype=np.uint8)
    except DataError:
        raise
    except FileNotFoundError:
        raise DataError(f"label file {path} does not exist; the dataset on disk is incomplete "
                        f"(re-extract or regenerate it)") from None
    except (OSError, ValueError, SyntaxError) as exc:
        raise DataError(f"cannot decode label map {path}: {exc}; the file is corrupt or truncated "
                        f"(replace it, or regenerate the dataset)") from exc


def is_image_file(name: str) -> bool:
    return name.lower().endswith(IMAGE_EXTENSIONS)


def find_synth_meta(start: Path, levels: int = 2) -> dict | None:
    """Return the SynthScenes meta.json found in ``start`` or up to ``levels`` parents, else None.

    Readers use it to pick up SynthScenes class names instead of the real dataset's,
    so that one reader serves both. Only a meta.json written by the generator counts.
    """
    start = Path(start)
    for folder in [start, *list(start.parents)[:levels]]:
        meta_path = folder / "meta.json"
        if meta_path.is_file():
            try:
                meta = json.loads(meta_path.read_text())
            except (OSError, ValueError):
                continue
            if isinstance(meta, dict) and meta.get("generator") == "synthscenes":
                return meta
    return None


def relative_listing(paths, root: Path) -> list[str]:
    """Root-relative POSIX paths, used for fingerprints that survive moving the data root."""
    root = Path(root)
    return [Path(p).relative_to(root).as_posix() for p in paths]


def files_stamp(paths) -> str:
    """Cheap content stamp of a file list: the size and modification time of every file.

    Fingerprints hash root-relative names only (stable across machines), so a dataset
    regenerated or replaced in place would look unchanged; caches of derived data (features)
    add this stamp so they are never served for files that changed since."""
    h = hashlib.sha256()
    for path in paths:
        st = os.stat(path)
        h.update(f"{st.st_size}:{st.st_mtime_ns};".encode())
    return h.hexdigest()[:24]


def content_stamp(source) -> str | None:
    """``source.content_stamp()`` for readers that have one (all of the harness's), else None."""
    stamp = getattr(source, "content_stamp", None)
    return stamp() if callable(stamp) else None


def data_stamp(data_root: Path) -> str:
    """Which data a result was computed on. SynthScenes: the generator's version, preset and
    seed (the same dataset wherever it lives); other data: the resolved root. Records, mmseg
    work dirs and pretraining caches include it, so the same request on other data runs again."""
    meta = find_synth_meta(Path(data_root), levels=2)
    if meta:
        ident = {"synthscenes": {k: meta.get(k) for k in ("version", "preset", "seed")},
                 "below": Path(data_root).name}
    else:
        ident = {"root": str(Path(data_root).expanduser().resolve())}
    return hashlib.sha256(json.dumps(ident, sort_keys=True).encode()).hexdigest()[:16]


def data_identity(data_root: Path) -> dict[str, str]:
    """The data a result was computed on, as records (and the artifacts they own) key it: the
    resolved root and its :func:`data_stamp`."""
    return {"data_root": str(Path(data_root).expanduser().resolve()), "data_stamp": data_stamp(data_root)}
