"""Readers of ImageNet's shifted sets in their released layouts (data set keys ``imagenet_v2``,
``imagenet_c``, ``backgrounds_challenge``; ImageFolder order: classes by sorted folder name, files
sorted). ImageNet-A, ImageNet-R and ImageNet-Sketch are plain ImageFolders of wnid folders
(``imagefolder`` with the set's folder as root); these three have layouts of their own. How each
set's labels meet the 1000 training classes is the reading protocol's business."""
from __future__ import annotations

from pathlib import Path

from harness.data.classification import ImageFolderDataset
from harness.errors import DataError
from harness.registry import register_dataset


def _folder(root: Path, sub: str, what: str, layout: str) -> None:
    if not (root / sub).is_dir():
        raise DataError(f"{what} folder {root / sub} not found; expected {layout}")


@register_dataset("imagenet_v2")
class ImageNetV2(ImageFolderDataset):
    """``root/<class index 0..999>/*.jpeg`` (ImageNetV2's released archives); ``split``: a
    sub-folder of the root, or None for the root itself."""

    name = "imagenet_v2"

    def __init__(self, root: str | Path, split: str | None = None):
        _folder(Path(root), split or ".", "ImageNetV2", "<root>/<class index>/<image>, class folders 0..999")
        super().__init__(root, split)


@register_dataset("imagenet_c")
class ImageNetC(ImageFolderDataset):
    """``root/<corruption>/<severity>/<wnid>/*.JPEG``; ``split`` is ``"<corruption>/<severity>"``."""

    name = "imagenet_c"

    def __init__(self, root: str | Path, split: str = "gaussian_noise/1"):
        _folder(Path(root), split, "ImageNet-C", "<root>/<corruption>/<severity>/<wnid>/<image> (severities 1-5)")
        super().__init__(root, split)


@register_dataset("backgrounds_challenge")
class BackgroundsChallenge(ImageFolderDataset):
    """``root/<variant>/val/<class>/*.JPEG`` (MadryLab/backgrounds_challenge's release: variants
    original, only_fg, mixed_same, ...; nine classes 00_dog .. 08_fish); ``split`` is the variant."""

    name = "backgrounds_challenge"

    def __init__(self, root: str | Path, split: str = "original"):
        _folder(Path(root), f"{split}/val", "backgrounds challenge",
                "<root>/<variant>/val/<class>/<image> (the release's bg_challenge folder)")
        super().__init__(root, f"{split}/val")
