"""Caption-group reader: images that share a caption form one multi-positive group
(SynCLR-style contrastive pretraining).

File format, one JSON object per line (blank lines allowed)::

    {"caption": "a striped disc on waves", "group_id": 0, "images": ["images/a.jpg", ...]}

Image paths are relative to the folder holding the .jsonl file (absolute paths are kept).
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from PIL import Image

from harness.config import fingerprint as _fingerprint
from harness.data.io import files_stamp, load_rgb
from harness.errors import DataError
from harness.registry import register_dataset

CAPTIONS_FILE = "captions.jsonl"


@dataclass(frozen=True)
class Group:
    caption: str
    group_id: int
    image_paths: tuple[Path, ...]


def _resolve(path: Path) -> Path:
    if path.is_file():
        return path
    # Accept the folder holding captions.jsonl, or a SynthScenes root above it.
    for candidate in (path / CAPTIONS_FILE, path / "captions" / CAPTIONS_FILE):
        if candidate.is_file():
            return candidate
    raise DataError(f"caption file not found: expected {path} to be a .jsonl file or to hold "
                    f"{CAPTIONS_FILE} (or captions/{CAPTIONS_FILE}); generate SynthScenes with "
                    f"`ssl-bench data synth --out DIR` and pass DIR/captions")


@register_dataset("captions")
class CaptionGroups:
    """Flat list of images (``len`` counts images) with their group ids and captions."""

    name = "captions"

    def __init__(self, path: str | Path, split: str | None = None):
        # Caption groups have a single split; ``split`` exists for the common reader signature.
        if split not in (None, "train"):
            raise DataError(f"caption groups have only one split (train); got split={split!r}")
        self.split = split
        self.path = _resolve(Path(path))
        self.root = self.path.parent
        self.groups: list[Group] = []
        seen: dict[int, int] = {}
        lines = self.path.read_text().splitlines()
        for lineno, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            group = self._parse(line, lineno)
            if group.group_id in seen:
                raise DataError(f"{self.path}:{lineno}: group_id {group.group_id} already used on "
                                f"line {seen[group.group_id]}; group ids must be unique")
            seen[group.group_id] = lineno
            self.groups.append(group)
        if not self.groups:
            raise DataError(f"{self.path} holds no caption groups")
        self.image_paths: list[Path] = [p for g in self.groups for p in g.image_paths]
        self.group_ids: list[int] = [g.group_id for g in self.groups for _ in g.image_paths]
        self.captions: list[str] = [g.caption for g in self.groups for _ in g.image_paths]

    def _parse(self, line: str, lineno: int) -> Group:
        where = f"{self.path}:{lineno}"
        try:
            obj = json.loads(line)
        except ValueError as exc:
            raise DataError(f"{where}: not valid JSON ({exc}); each line must be "
                            f'{{"caption": str, "group_id": int, "images": [paths]}}') from None
        if not isinstance(obj, dict):
            raise DataError(f"{where}: expected a JSON object, found {type(obj).__name__}")
        missing = [k for k in ("caption", "group_id", "images") if k not in obj]
        if missing:
            raise DataError(f"{where}: missing key(s) {', '.join(missing)}")
        caption, gid, images = obj["caption"], obj["group_id"], obj["images"]
        if not isinstance(caption, str) or not caption.strip():
            raise DataError(f"{where}: 'caption' must be a non-empty string, found {caption!r}")
        if not isinstance(gid, int) or isinstance(gid, bool):
            raise DataError(f"{where}: 'group_id' must be an integer, found {gid!r}")
        if (not isinstance(images, list) or not images
                or not all(isinstance(p, str) and p for p in images)):
            raise DataError(f"{where}: 'images' must be a non-empty list of paths, found {images!r}")
        paths = tuple(self.root / p for p in images)
        for p in paths:
            if not p.is_file():
                raise DataError(f"{where}: image {p} does not exist; the caption dataset is incomplete")
        return Group(caption, gid, paths)

    def __len__(self) -> int:
        return len(self.image_paths)

    def __getitem__(self, i: int) -> tuple[Image.Image, int]:
        return self.load_image(i), self.group_ids[i]

    def __repr__(self) -> str:
        return f"CaptionGroups(path={str(self.path)!r}, groups={len(self.groups)}, images={len(self)})"

    def load_image(self, i: int) -> Image.Image:
        return load_rgb(self.image_paths[i])

    def group_members(self) -> dict[int, list[int]]:
        """group_id -> indices of its images (for samplers that draw whole groups)."""
        out: dict[int, list[int]] = {}
        for i, gid in enumerate(self.group_ids):
            out.setdefault(gid, []).append(i)
        return out

    def content_stamp(self) -> str:
        """Sizes and mtimes of the files (see harness.data.io.files_stamp)."""
        return files_stamp(self.image_paths)

    def fingerprint(self) -> str:
        """Hash of the captions, group ids and file-relative image paths."""
        return _fingerprint({
            "dataset": self.name,
            "groups": [[g.group_id, g.caption,
                        [_relative(p, self.root) for p in g.image_paths]] for g in self.groups],
        })


def _relative(path: Path, root: Path) -> str:
    try:
        return path.relative_to(root).as_posix()
    except ValueError:  # absolute path outside the captions folder
        return path.as_posix()
