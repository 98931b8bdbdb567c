"""NAVI in the layout Probe3D reads (evals/datasets/navi.py and utils.py, commit a1f1464; configs/
dataset/navi.yaml; data_processing/resize_navi.py), for its normals and depth probes.

``root/<object>/<collection>/`` for collections ``multiview_*`` and ``wild_set``, each with
``annotations.json`` (a list of {"filename", "camera": {"focal_length", ...}, "image_size": [h, w],
...}), ``images/<id>.jpg`` (listed: ids without "_"), ``images/downsampled_<id>.jpg`` and
``depth/downsampled_<id>.png`` (read). An object without a ``wild_set``, or with nothing else, is
skipped. Splits: ``trainval`` every multiview frame, ``train`` / ``valid`` the first 90% / the rest
of each object's multiview collections, ``test`` every wild_set frame; then every 4th frame
(``instances[::4]``). Probe3D walks the folders in the file system's listing order; here objects,
collections and ids are sorted, so the every-4th subset is the same on every machine.

Each frame, as ``get_single`` prepares it (not augmented): the image and depth resized so that the
short side is 512 and centre-cropped to 512 x 512 (nearest); depth from the 16-bit disparity PNG
(raw / (65535 x 10), 0 = none, inverted, / 1000 to metres); cropped to the square around the pixels
with depth (``bbox_crop``); normals computed from that depth with the focal length scaled to the
512 frame (``compute_normal``: the four cross products of the neighbour differences averaged, zero
on the border and where depth is 0); everything resized to 512 x 512 (nearest); depth below the
frame's smallest valid depth set to 0.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch
import torchvision.transforms.functional as TF
from PIL import Image, ImageOps
from torchvision.transforms import InterpolationMode

from harness.config import fingerprint as _fingerprint
from harness.data.io import files_stamp
from harness.data.navi import bbox_crop, read_disparity_depth
from harness.errors import DataError
from harness.registry import register_dataset

SPLITS = ("trainval", "train", "valid", "test")
SIZE = 512
LAYOUT = ("the Probe3D NAVI layout is <root>/<object>/<multiview_*|wild_set>/ with annotations.json, images/<id>.jpg, "
          "images/downsampled_<id>.jpg and depth/downsampled_<id>.png (data_processing/resize_navi.py)")


def normals_from_depth(depth: torch.Tensor, focal: float) -> torch.Tensor:
    """(3, H, W) unit normals of a (1, H, W) depth map, camera at the origin, principal point at 0
    (utils.py compute_normal: intrinsics eye(3) with fx = fy = focal)."""
    mask = (depth > 0).float()
    depth = torch.where(depth == 0, torch.full_like(depth, 1e6), depth)
    _, h, w = depth.shape
    xs = torch.linspace(0.5, w - 0.5, w).view(1, w).repeat(h, 1)
    ys = torch.linspace(0.5, h - 0.5, h).view(h, 1).repeat(1, w)
    intrinsics = torch.eye(3)
    intrinsics[0, 0] = intrinsics[1, 1] = focal
    uvd = torch.stack([xs, ys, torch.ones_like(xs)]) * depth
    xyz = (torch.inverse(intrinsics) @ uvd.view(3, -1)).view(3, h, w)  # in this order, as there
    c = xyz[:, 1:-1, 1:-1]
    left, top = xyz[:, 1:-1, :-2] - c, xyz[:, :-2, 1:-1] - c
    right, bottom = xyz[:, 1:-1, 2:] - c, xyz[:, 2:, 1:-1] - c
    cross = torch.linalg.cross
    normal = torch.zeros_like(xyz)
    normal[:, 1:-1, 1:-1] = (cross(left, top, dim=0) + cross(top, right, dim=0) + cross(right, bottom, dim=0)
                             + cross(bottom, left, dim=0)) / 4.0
    return torch.nn.functional.normalize(normal, p=2, dim=0) * mask


def _frame_resize(x: torch.Tensor, size: int) -> torch.Tensor:
    """Short side to 512, then the centred 512 x 512 (navi transforms: Resize(512, NEAREST), CenterCrop)."""
    return TF.center_crop(TF.resize(x, size, interpolation=InterpolationMode.NEAREST), size)


def _square_resize(x: torch.Tensor, size: int) -> torch.Tensor:
    return torch.nn.functional.interpolate(x[None], size=(size, size), mode="nearest")[0]


def prepared_frame(image_path: Path, depth_path: Path, anno: dict, size: int = SIZE) -> tuple:
    """(uint8 (S, S, 3) image, float32 (S, S) depth, float32 (3, S, S) normals), S = 512 as Probe3D."""
    try:
        with Image.open(image_path) as im:
            rgb = np.asarray(ImageOps.exif_transpose(im).convert("RGB"))
    except (OSError, ValueError) as exc:
        raise DataError(f"cannot read NAVI image {image_path}: {exc}") from exc
    image = _frame_resize(torch.from_numpy(rgb.copy()).permute(2, 0, 1), size)
    raw = read_disparity_depth(depth_path)
    if not (raw > 0).any():
        raise DataError(f"NAVI depth {depth_path} has no valid pixel")
    min_depth = float(raw[raw > 0].min())
    depth = _frame_resize(torch.from_numpy(raw)[None], size)
    orig_h, orig_w = anno["image_size"]
    focal = anno["camera"]["focal_length"] * size / min(orig_h, orig_w)
    image, depth = bbox_crop([image, depth], depth)
    normals = normals_from_depth(depth.clone(), focal)
    image = _square_resize(image.float(), size).round().to(torch.uint8)
    depth, normals = _square_resize(depth, size), _square_resize(normals, size)
    depth[depth < min_depth] = 0
    return image.permute(1, 2, 0).numpy(), depth[0].numpy(), normals.numpy()


def _collections(root: Path) -> dict[str, dict[str, Path]]:
    """{object: {collection: folder}} of the objects Probe3D keeps (a wild_set and a multiview)."""
    found: dict[str, dict[str, Path]] = {}
    for folder in sorted(root.glob("*/multiview_*")) + sorted(root.glob("*/wild_set")):
        found.setdefault(folder.parent.name, {})[folder.name] = folder
    return {o: c for o, c in sorted(found.items()) if "wild_set" in c and len(c) > 1}


def _views(folder: Path) -> tuple[list[str], dict[str, dict]]:
    ann_path = folder / "annotations.json"
    try:
        annotations = {a["filename"].split(".")[0]: a for a in json.loads(ann_path.read_text())}
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise DataError(f"cannot read NAVI annotations {ann_path}: {exc}; {LAYOUT}") from exc
    if not (folder / "images").is_dir():
        raise DataError(f"NAVI folder {folder / 'images'} not found: {LAYOUT}")
    ids = sorted(p.name.split(".")[0] for p in (folder / "images").iterdir() if "jpg" in p.name)
    return [i for i in ids if "_" not in i], annotations


def navi_instances(root: Path, split: str) -> list[tuple[Path, str, dict]]:
    """(collection folder, image id, annotation) of the split, every 4th."""
    out = []
    for collections in _collections(root).values():
        if split == "test":
            chosen = ["wild_set"]
        else:
            multi = [c for c in collections if c.startswith("multiview")]
            cut = int(0.9 * len(multi))
            chosen = {"trainval": multi, "train": multi[:cut], "valid": multi[cut:]}[split]
        for name in chosen:
            ids, annotations = _views(collections[name])
            for i in ids:
                if i not in annotations:
                    raise DataError(f"NAVI image {i} of {collections[name]} has no entry in annotations.json")
                out.append((collections[name], i, annotations[i]))
    return out[::4]


@register_dataset("navi_probe3d")
class NAVIFrames:
    """``(root, split)``; ``load_image(i)`` uint8 (512, 512, 3), ``load_depth(i)`` float32 metres
    (0 = none), ``load_normals(i)`` float32 (3, 512, 512), as nyu_probe3d.NYUNormals. ``max_depth`` is
    not applied to the frames (navi.py sets none; its value, 1 m, is the depth probe's last bin)."""

    name = "navi_probe3d"
    thread_safe = False  # the last prepared frame is cached

    def __init__(self, root: str | Path, split: str = "trainval", max_depth: float = 1.0, frame_size: int = SIZE):
        if split not in SPLITS:
            raise DataError(f"navi_probe3d split {split!r} is unknown; choose one of {', '.join(SPLITS)}")
        self.root, self.split, self.max_depth, self.frame_size = Path(root), split, float(max_depth), int(frame_size)
        if not self.root.is_dir() or not _collections(self.root):
            raise DataError(f"no NAVI object with a wild_set and a multiview collection under {self.root}: {LAYOUT}")
        self.items = navi_instances(self.root, split)
        if not self.items:
            raise DataError(f"navi_probe3d {split} split under {self.root} is empty: {LAYOUT}")
        self._cached: tuple[int, tuple] | None = None

    def __len__(self) -> int:
        return len(self.items)

    def paths(self, i: int) -> tuple[Path, Path]:
        folder, view, _ = self.items[i]
        return folder / "images" / f"downsampled_{view}.jpg", folder / "depth" / f"downsampled_{view}.png"

    def _frame(self, i: int) -> tuple:
        if self._cached is None or self._cached[0] != i:  # one frame's three maps come from one preparation
            image_path, depth_path = self.paths(i)
            for p in (image_path, depth_path):
                if not p.is_file():
                    raise DataError(f"NAVI file {p} does not exist: {LAYOUT}")
            self._cached = (i, prepared_frame(image_path, depth_path, self.items[i][2], self.frame_size))
        return self._cached[1]

    def load_image(self, i: int) -> np.ndarray:
        return self._frame(i)[0]

    def load_depth(self, i: int) -> np.ndarray:
        return self._frame(i)[1]

    def load_normals(self, i: int) -> np.ndarray:
        return self._frame(i)[2]

    def fingerprint(self) -> str:
        return _fingerprint({"dataset": self.name, "split": self.split, "frame_size": self.frame_size,
                             "views": [f"{f.relative_to(self.root).as_posix()}/{v}" for f, v, _ in self.items]})

    def stamp(self) -> str:
        return files_stamp([p for i in range(len(self)) for p in self.paths(i)])
