"""Image classification reader for the ImageFolder (ImageNet) layout.

Class order and sample order follow torchvision's ``ImageFolder`` (classes sorted by
folder name, files sorted within each folder, recursively), so labels agree with any
code that used torchvision on the same folder.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

from PIL import Image

from harness.config import fingerprint as _fingerprint
from harness.data.io import IMAGE_EXTENSIONS, files_stamp, is_image_file, load_rgb
from harness.errors import DataError
from harness.registry import register_dataset

_HINT = ("expected <root>/<split>/<class>/<image> (ImageNet layout); for SynthScenes use "
         "<synth root>/imagenet as the root (generate it with `ssl-bench data synth --out DIR`)")


class LabelledImages:
    """What a classification reader serves: ``samples`` (path, label), ``targets``,
    ``image_paths`` and ``classes``, set by the subclass."""

    classes: list[str]
    samples: list[tuple[Path, int]]
    targets: list[int]
    image_paths: list[Path]

    @property
    def num_classes(self) -> int:
        return len(self.classes)

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, i: int) -> tuple[Image.Image, int]:
        return self.load_image(i), self.targets[i]

    def load_image(self, i: int) -> Image.Image:
        return load_rgb(self.image_paths[i])

    def content_stamp(self) -> str:
        """Sizes and mtimes of the files (see harness.data.io.files_stamp)."""
        return files_stamp(self.image_paths)


@register_dataset("imagefolder")
@register_dataset("imagenet")
class ImageFolderDataset(LabelledImages):
    """``root/split/<class>/**/<image>``; with ``split=None`` the root is the split folder."""

    name = "imagefolder"

    def __init__(self, root: str | Path, split: str | None = "train"):
        root = Path(root)
        if not root.exists():
            raise DataError(f"ImageFolder root {root} does not exist; {_HINT}")
        self.root = root
        self.split = split
        self.split_dir = root if split is None else root / split
        if not self.split_dir.is_dir():
            raise DataError(f"ImageFolder split folder {self.split_dir} not found; {_HINT}")
        self.classes = sorted(e.name for e in os.scandir(self.split_dir) if e.is_dir())
        if not self.classes:
            raise DataError(f"{self.split_dir} has no class sub-folders; {_HINT}")
        self.class_to_idx = {c: i for i, c in enumerate(self.classes)}
        self.samples: list[tuple[Path, int]] = []
        empty = []
        for cls in self.classes:
            before = len(self.samples)
            for dirpath, _, files in sorted(os.walk(self.split_dir / cls, followlinks=True)):
                for fname in sorted(files):
                    if is_image_file(fname):
                        self.samples.append((Path(dirpath) / fname, self.class_to_idx[cls]))
            if len(self.samples) == before:
                empty.append(cls)
        if empty:
            # torchvision refuses this too: an empty class would shift nothing but silently
            # make a class unlearnable and unevaluable.
            raise DataError(f"no images ({', '.join(IMAGE_EXTENSIONS)}) in class folder(s) "
                            f"{', '.join(empty[:10])} under {self.split_dir}")
        self.targets = [label for _, label in self.samples]
        self.image_paths = [path for path, _ in self.samples]
        self.stems = [p.relative_to(self.split_dir).with_suffix("").as_posix() for p in self.image_paths]


    def __repr__(self) -> str:
        return (f"ImageFolderDataset(root={str(self.root)!r}, split={self.split!r}, n={len(self)}, "
                f"num_classes={self.num_classes})")

    def fingerprint(self) -> str:
        """Hash of the split-relative file list, the labels and the split name."""
        return _fingerprint({
            "dataset": self.name, "split": self.split, "classes": self.classes,
            "files": [p.relative_to(self.split_dir).as_posix() for p in self.image_paths],
        })


@register_dataset("synth_background")
class SceneBackgroundDataset(LabelledImages):
    """SynthScenes' scene images labelled by their background (the four stuff textures), one
    class per stuff class; scenes whose background is split between two stuff classes are left
    out. The object classes of the ``imagefolder`` split are texture x shape, and the shape
    factor stays at chance for every CPU-budget model here, the supervised one included
    (docs/findings/synthscenes.md); the background is the part of the image a few thousand pretraining steps
    learn to describe (dense NN measures the same stuff classes per patch)."""

    name = "synth_background"

    def __init__(self, root: str | Path, split: str | None = "train"):
        from harness.data.synthetic import STUFF_CLASSES, load_meta

        root = Path(root)
        meta = load_meta(root)
        scenes = root / meta["layouts"]["scenes"]
        if not scenes.is_file():
            raise DataError(f"{scenes} not found: {root} is a SynthScenes root without its scene list; "
                            f"regenerate it with `ssl-bench data synth --out {root}`")
        if split not in ("train", "val"):
            raise DataError(f"synth_background has the splits train and val, not {split!r}")
        self.root, self.split = root, split
        self.split_dir = root / meta["layouts"]["voc"] / "JPEGImages"
        self.classes = list(STUFF_CLASSES)
        self.class_to_idx = {c: i for i, c in enumerate(self.classes)}
        rows = [json.loads(line) for line in scenes.read_text().splitlines() if line.strip()]
        kept = [r for r in rows if r["split"] == split and len(r["background"]) == 1]
        unknown = sorted({r["background"][0] for r in kept} - set(self.classes))
        if unknown:
            raise DataError(f"{scenes}: backgrounds {unknown} are not this generator's stuff classes {self.classes}")
        self.stems = [r["stem"] for r in kept]
        self.image_paths = [self.split_dir / f"{s}.jpg" for s in self.stems]
        self.targets = [self.class_to_idx[r["background"][0]] for r in kept]
        self.samples = list(zip(self.image_paths, self.targets))
        missing = [p for p in self.image_paths[:1] + self.image_paths[-1:] if not p.is_file()]
        if not kept or missing:
            raise DataError(f"no scene images of split {split!r} under {self.split_dir} "
                            f"({'missing ' + str(missing[0]) if missing else 'none with one background'})")


    def __repr__(self) -> str:
        return f"SceneBackgroundDataset(root={str(self.root)!r}, split={self.split!r}, n={len(self)})"

    def fingerprint(self) -> str:
        """Hash of the scene stems, the labels and the split name."""
        return _fingerprint({"dataset": self.name, "split": self.split, "classes": self.classes,
                             "files": self.stems, "targets": self.targets})
