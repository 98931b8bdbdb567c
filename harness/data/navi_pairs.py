"""NAVI image pairs as Probe3D's NAVI correspondence evaluation reads them (mbanani/probe3d @ a1f1464,
evals/datasets/navi.py with ``pair_dataset=True``, evals/datasets/utils.py; configs/dataset/navi.yaml).

Layout: ``root/<object>/<collection>/`` for collections ``multiview_*`` and ``wild_set``, each with
``annotations.json`` (a list of {"filename", "image_size": [h, w], "camera": {"focal_length", "q"
[w, x, y, z], "t" [mm]}}), ``images/<id>.jpg`` (listed: ids without "_"), and, read,
``images/downsampled_<id>.jpg`` and ``depth/downsampled_<id>.png`` (data_processing/resize_navi.py).
An object without a ``wild_set``, or with nothing else, is skipped. Split ``test`` (Probe3D's): every
wild_set view; ``trainval`` / ``train`` / ``valid``: the multiview collections (all, first 90%, rest).

Pairs: with ``torch.manual_seed(8)``, each view of the split draws a partner among the views of its
collection whose relative rotation is above 0 and at most ``max_angle`` (120) degrees, computed in
float32 from the quaternions (the view itself is drawn when float32 rounding leaves its angle to
itself above 0: Probe3D's quirk, kept); then every 4th view is a pair's first image. Probe3D walks
the folders in the file system's listing order; here objects, collections and ids are sorted.

Each frame as ``get_single`` prepares it: image and depth (disparity PNG, raw / (65535 x 10), 0 =
none, inverted, / 1000 to metres) resized so that the short side is ``frame_size`` (512) and
centre-cropped (nearest); the camera-frame points ``K^-1 (u, v, 1) depth`` with ``K`` of focal
length scaled to that frame and principal point at its centre; image, depth and points cropped to
the square around the pixels with depth (``bbox_crop``) and resized to ``frame_size`` (nearest);
the pose ``[R(q) | t / 1000]``; the intrinsics ``diag(f', f', 1)`` with ``f'`` the focal length
scaled to the crop and no principal point (Probe3D's, kept: it cancels in a difference of two
projections).
"""
from __future__ import annotations

import json
from collections import OrderedDict
from dataclasses import dataclass
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

SPLITS = ("test", "trainval", "train", "valid")
CACHED_FRAMES = 16
LAYOUT = ("NAVI's layout as Probe3D reads it: <root>/<object>/<multiview_*|wild_set>/ with annotations.json "
          "(filename, image_size, camera: focal_length, q, t), images/<id>.jpg, images/downsampled_<id>.jpg and "
          "depth/downsampled_<id>.png")


@dataclass(frozen=True)
class View:
    object: str
    collection: str
    id: str
    annotation: dict

    @property
    def key(self) -> str:
        return f"{self.object}/{self.collection}/{self.id}"


@dataclass(frozen=True)
class NaviPair:
    first: View
    second: View

    @property
    def name(self) -> str:
        return f"{self.first.key}-{self.second.id}"


def rotation_from_quaternion(q) -> torch.Tensor:
    """(3, 3) float32 rotation of a (w, x, y, z) quaternion, normalised by 2 / |q|^2, in the
    float32 operations Probe3D's utils.py uses (the pair draw thresholds angles computed from it)."""
    q = torch.as_tensor(q, dtype=torch.float32)
    w, x, y, z = q.unbind(-1)
    s = 2.0 / (q * q).sum(dim=-1)
    return torch.stack([
        torch.stack([1 - s * (y ** 2 + z ** 2), s * (x * y - z * w), s * (x * z + y * w)]),
        torch.stack([s * (x * y + z * w), 1 - s * (x ** 2 + z ** 2), s * (y * z - x * w)]),
        torch.stack([s * (x * z - y * w), s * (y * z + x * w), 1 - s * (x ** 2 + y ** 2)])])


def camera_pose(annotation: dict, path: Path) -> torch.Tensor:
    """(4, 4) float32 world-to-camera pose, translation in metres (the annotation's is in mm)."""
    try:
        camera = annotation["camera"]
        rt = torch.eye(4)
        rt[:3, :3] = rotation_from_quaternion([float(v) for v in camera["q"]])
        rt[:3, 3] = torch.as_tensor([float(v) for v in camera["t"]], dtype=torch.float32) / 1000.0
    except (KeyError, TypeError, ValueError, RuntimeError) as exc:
        raise DataError(f"NAVI annotation of {annotation.get('filename')} in {path} lacks camera q [w, x, y, z] "
                        f"and t [x, y, z] ({exc}); {LAYOUT}") from None
    return rt


def relative_angles(rotations: torch.Tensor, i: int) -> torch.Tensor:
    """Degrees between view i and every view, float32 (navi.py generate_instance_pairs)."""
    r = torch.bmm(rotations[i, None].repeat(len(rotations), 1, 1), rotations.permute(0, 2, 1))
    trace = r[:, 0, 0] + r[:, 1, 1] + r[:, 2, 2]
    return (0.5 * trace - 0.5).clamp(min=-1, max=1).acos() * 180 / np.pi


def draw_partners(views: list[View], max_angle: float, seed: int, where: Path) -> dict[str, View]:
    """view key -> its partner, one torch.multinomial draw per view in order, one generator for all."""
    generator = torch.Generator().manual_seed(seed)
    groups: dict[tuple[str, str], list[View]] = {}
    for v in views:
        groups.setdefault((v.object, v.collection), []).append(v)
    partners = {}
    for group in groups.values():
        rotations = torch.stack([camera_pose(v.annotation, where)[:3, :3] for v in group])
        for i, v in enumerate(group):
            weight = relative_angles(rotations, i)
            weight[weight > max_angle] = 0
            weight[weight > 0] = 1
            if not weight.any():
                raise DataError(f"NAVI view {v.key} under {where} has no other view of its collection within "
                                f"{max_angle:g} degrees to pair with; {LAYOUT}")
            partners[v.key] = group[int(torch.multinomial(weight, 1, generator=generator))]
    return partners


def _collections(root: Path) -> dict[str, dict[str, Path]]:
    found: dict[str, dict[str, Path]] = {}
    for folder in sorted(root.glob("*/multiview_*")) + sorted(root.glob("*/wild_set")):
        found.setdefault(folder.parent.name, {})[folder.name] = folder
    return {o: c for o, c in sorted(found.items()) if "wild_set" in c and len(c) > 1}


def collection_views(folder: Path) -> list[View]:
    ann_path = folder / "annotations.json"
    try:
        annotations = {a["filename"].split(".")[0]: a for a in json.loads(ann_path.read_text())}
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise DataError(f"cannot read NAVI annotations {ann_path}: {exc}; {LAYOUT}") from None
    if not (folder / "images").is_dir():
        raise DataError(f"NAVI folder {folder / 'images'} not found; {LAYOUT}")
    ids = sorted(p.name.split(".")[0] for p in (folder / "images").iterdir() if "jpg" in p.name)
    missing = [i for i in ids if "_" not in i and i not in annotations]
    if missing:
        raise DataError(f"NAVI image {folder / 'images' / (missing[0] + '.jpg')} has no entry in {ann_path}")
    return [View(folder.parent.name, folder.name, i, annotations[i]) for i in ids if "_" not in i]


def split_views(root: Path, split: str) -> list[View]:
    out = []
    for collections in _collections(root).values():
        multi = [c for c in collections if c.startswith("multiview")]
        cut = int(0.9 * len(multi))
        chosen = {"test": ["wild_set"], "trainval": multi, "train": multi[:cut], "valid": multi[cut:]}[split]
        for name in chosen:
            out.extend(collection_views(collections[name]))
    return out


def _frame_resize(x: torch.Tensor, size: int) -> torch.Tensor:
    return TF.center_crop(TF.resize(x, size, interpolation=InterpolationMode.NEAREST), size)


def _square(x: torch.Tensor, size: int) -> torch.Tensor:
    return torch.nn.functional.interpolate(x[None], size=(size, size), mode="nearest")[0]


def pixel_grid(h: int, w: int) -> torch.Tensor:
    """(3, h, w): pixel centres (u, v) and 1."""
    xs = torch.linspace(0.5, w - 0.5, w).view(1, w).repeat(h, 1)
    ys = torch.linspace(0.5, h - 0.5, h).view(h, 1).repeat(1, w)
    return torch.stack((xs, ys, torch.ones_like(xs)), dim=0)


def prepared_frame(image_path: Path, depth_path: Path, annotation: dict, size: int) -> dict:
    """{"image": uint8 (S, S, 3), "xyz": float32 (3, S, S) camera-frame points in metres (z = 0:
    no depth), "focal": the crop's focal length} of one view (navi.py get_single, not augmented)."""
    for p in (image_path, depth_path):
        if not p.is_file():
            raise DataError(f"NAVI file {p} does not exist; {LAYOUT}")
    try:
        with Image.open(image_path) as im:
            rgb = np.asarray(ImageOps.exif_transpose(im).convert("RGB"))
    except (OSError, ValueError) as exc:
        raise DataError(f"cannot read NAVI image {image_path}: {exc}") from None
    image = _frame_resize(torch.from_numpy(rgb.copy()).permute(2, 0, 1), size)
    depth = _frame_resize(torch.from_numpy(read_disparity_depth(depth_path))[None], size)
    if not (depth > 0).any():
        raise DataError(f"NAVI depth {depth_path} has no pixel with depth inside the centre crop")
    try:
        orig_h, orig_w = annotation["image_size"]
        focal = float(annotation["camera"]["focal_length"]) * size / min(orig_h, orig_w)
    except (KeyError, TypeError, ValueError) as exc:
        raise DataError(f"NAVI annotation of {image_path.name} lacks image_size [h, w] or camera focal_length "
                        f"({exc}); {LAYOUT}") from None
    k = torch.eye(3)
    k[0, 0] = k[1, 1] = focal
    k[0, 2] = k[1, 2] = 0.5 * size  # navi.py: the principal point at the frame's centre
    xyz = (k.inverse() @ (depth * pixel_grid(size, size)).view(3, size * size)).view(3, size, size)
    image, depth, xyz = bbox_crop([image, depth, xyz], depth)
    side = min(depth.shape[1:])
    image = _square(image.float(), size).round().to(torch.uint8)
    return {"image": image.permute(1, 2, 0).numpy(), "xyz": _square(xyz, size), "focal": focal * size / side}


@register_dataset("navi")
class NAVIPairs:
    """``(root, split)``: ``pairs`` (first view, partner), ``frame(view)`` (image, points, pose,
    focal length), ``images`` of every view a pair uses."""

    name = "navi"
    thread_safe = False

    def __init__(self, root: str | Path, split: str = "test", max_angle: float = 120.0, pair_seed: int = 8,
                 frame_size: int = 512):
        if split not in SPLITS:
            raise DataError(f"NAVI split {split!r} is unknown; choose one of {', '.join(SPLITS)}")
        self.root, self.split, self.frame_size = Path(root), split, int(frame_size)
        self.max_angle, self.pair_seed = float(max_angle), int(pair_seed)
        if not self.root.is_dir() or not _collections(self.root):
            raise DataError(f"no NAVI object with a wild_set and a multiview collection under {self.root}; {LAYOUT}")
        views = split_views(self.root, split)
        if not views:
            raise DataError(f"NAVI {split} split under {self.root} has no view; {LAYOUT}")
        partners = draw_partners(views, self.max_angle, self.pair_seed, self.root)
        self.pairs = [NaviPair(v, partners[v.key]) for v in views[::4]]
        self.views = sorted({v.key: v for p in self.pairs for v in (p.first, p.second)}.values(), key=lambda v: v.key)
        self._frames: OrderedDict[str, dict] = OrderedDict()

    def __len__(self) -> int:
        return len(self.pairs)

    def paths(self, view: View) -> tuple[Path, Path]:
        folder = self.root / view.object / view.collection
        return folder / "images" / f"downsampled_{view.id}.jpg", folder / "depth" / f"downsampled_{view.id}.png"

    def frame(self, view: View) -> dict:
        """{"image", "xyz", "focal", "pose"} of ``view``; the last ``CACHED_FRAMES`` are kept (a
        512 frame's points take 3 MB: a whole split would not fit in memory)."""
        if view.key not in self._frames:
            out = prepared_frame(*self.paths(view), view.annotation, self.frame_size)
            out["pose"] = camera_pose(view.annotation, self.root / view.object / view.collection)
            self._frames[view.key] = out
            while len(self._frames) > CACHED_FRAMES:
                self._frames.popitem(last=False)
        return self._frames[view.key]

    def fingerprint(self) -> str:
        return _fingerprint({"dataset": self.name, "split": self.split, "max_angle": self.max_angle,
                             "pair_seed": self.pair_seed, "frame_size": self.frame_size,
                             "pairs": [p.name for p in self.pairs]})

    def stamp(self) -> str:
        return files_stamp([p for v in self.views for p in self.paths(v)])


class NaviImages:
    """The ImageSource of the prepared frames of the given views (uint8 arrays, frame_size square)."""

    thread_safe = False

    def __init__(self, data: NAVIPairs, views: list[View]):
        self.data, self.views = data, list(views)

    def __len__(self) -> int:
        return len(self.views)

    def load_image(self, i: int) -> Image.Image:
        return Image.fromarray(self.data.frame(self.views[i])["image"])

    def fingerprint(self) -> str:
        return _fingerprint({"dataset": "navi_frames", "frame_size": self.data.frame_size,
                             "views": [v.key for v in self.views]})

    def content_stamp(self) -> str:
        return files_stamp([p for v in self.views for p in self.data.paths(v)])
