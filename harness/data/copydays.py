"""Copydays (Douze et al. 2009, key ``copydays``) as DINO's ``eval_copy_detection.py`` reads it,
written anew: 20 query blocks (original, strong, 9 JPEG qualities, 9 crop sizes), each query with
the originals it copies; ``<root>/original``, ``<root>/strong``, ``<root>/jpegqual/<q>``,
``<root>/crops/<c>`` of ``.jpg`` files.

Block sizes come from the listing; eval_copy_detection.py writes them down (157 for every
block, 229 for strong), which is what the real Copydays holds.
"""
from __future__ import annotations

import os
from pathlib import Path

from harness.config import fingerprint as _fingerprint
from harness.data.image_list import ImageList
from harness.data.io import files_stamp
from harness.errors import DataError
from harness.registry import register_dataset

# eval_copy_detection.py CopydaysDataset.block_names, in its order
BLOCKS = (("original", "strong") + tuple(f"jpegqual/{q}" for q in (3, 5, 8, 10, 15, 20, 30, 50, 75))
          + tuple(f"crops/{c}" for c in (10, 15, 20, 30, 40, 50, 60, 70, 80)))
STRONG = "strong"


def _jpgs(folder: Path) -> list[str]:
    if not folder.is_dir():
        raise DataError(f"Copydays folder {folder} not found; the layout is <root>/original, <root>/strong, "
                        "<root>/jpegqual/<3..75>, <root>/crops/<10..80> of .jpg files")
    return [n for n in sorted(os.listdir(folder)) if n.endswith(".jpg")]


@register_dataset("copydays")
class Copydays:
    """``root`` is the Copydays folder (the official ``--data_path``) or holds ``copydays/``.
    ``split``: ``query`` (every block, in order) or ``database`` (the originals)."""

    name = "copydays"

    def __init__(self, root: str | Path, split: str = "query"):
        if split not in ("query", "database"):
            raise DataError(f"copydays split {split!r} is unknown; choose query or database")
        root = Path(root)
        self.root = root if (root / "original").is_dir() else root / "copydays"
        self.split = split
        self.block_files = {b: _jpgs(self.root / b) for b in BLOCKS}
        self.originals = self.block_files["original"]
        self.positives = self._positives()
        blocks = BLOCKS if split == "query" else ("original",)
        paths = [self.root / b / n for b in blocks for n in self.block_files[b]]
        self.block_sizes = [len(self.block_files[b]) for b in blocks]
        self.source = ImageList(self.root, paths, f"copydays/{split}")

    def _positives(self) -> dict[str, list[list[int]]]:
        """Per block, per query, the indices of its originals: 1:1 by position, except strong
        (the originals sharing the query name's first four characters)."""
        n = len(self.originals)
        if n == 0:
            raise DataError(f"Copydays folder {self.root / 'original'} holds no .jpg image")
        out = {}
        for b in BLOCKS:
            files = self.block_files[b]
            if b == STRONG:
                out[b] = [[j for j, o in enumerate(self.originals) if o[:4] == q[:4]] for q in files]
                orphans = [q for q, p in zip(files, out[b]) if not p]
                if orphans:
                    raise DataError(f"Copydays strong image {orphans[0]} has no original with the same "
                                    f"4-character prefix in {self.root / 'original'}")
            else:
                if len(files) != n:
                    raise DataError(f"Copydays block {b} holds {len(files)} images, not the {n} originals "
                                    "it maps one to one")
                out[b] = [[i] for i in range(n)]
        return out

    def __len__(self) -> int:
        return len(self.source)

    def load_image(self, i: int):
        return self.source.load_image(i)

    def fingerprint(self) -> str:
        return _fingerprint({"dataset": "copydays", "split": self.split, "inner": self.source.fingerprint()})

    def content_stamp(self) -> str:
        return files_stamp(self.source.paths)

    def block_slices(self) -> dict[str, slice]:
        out, start = {}, 0
        for b in BLOCKS:
            out[b] = slice(start, start + len(self.block_files[b]))
            start += len(self.block_files[b])
        return out
