"""What the box readers (harness.data.voc_boxes, harness.data.coco20k) share: a data set of
images with ground-truth boxes, read one image and its boxes at a time, with the identity that
records keep (the root-relative file list and the files' stamp)."""
from __future__ import annotations

from pathlib import Path

from PIL import Image

from harness.config import fingerprint as _fingerprint
from harness.data.io import files_stamp, find_synth_meta, load_rgb

# what to do about a missing or wrong box layout
LAYOUT_HINT = ("point the data root at the official layout (`ssl-bench data list` names its docs section), or "
         "generate a SynthScenes set with `ssl-bench data synth --for PROTOCOL`")


class BoxDataset:
    """Shared: ``stems``, ``image_paths``, ``load_image(i)``, ``boxes(i)`` -> (n, 4) int64
    (x0, y0, x1, y1), ``fingerprint()`` and ``content_stamp()``."""

    name = "boxes"
    root: Path
    split: str
    stems: list[str]
    image_paths: list[Path]

    def __len__(self) -> int:
        return len(self.stems)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(root={str(self.root)!r}, split={self.split!r}, n={len(self)})"

    def load_image(self, i: int) -> Image.Image:
        return load_rgb(self.image_paths[i])

    @property
    def is_synthetic(self) -> bool:
        return find_synth_meta(self.root, levels=2) is not None

    def content_stamp(self) -> str:
        return files_stamp(self.image_paths)

    def fingerprint(self) -> str:
        return _fingerprint({"dataset": self.name, "split": self.split,
                             "images": [p.relative_to(self.root).as_posix() for p in self.image_paths]})
