"""NYU Depth v2 with surface normals in the layout Probe3D reads (evals/datasets/nyu.py and
data_processing/create_nyu_pkl.py, commit a1f1464; configs/dataset/nyu.yaml), under one data root:

- ``nyuv2_geonet/*.mat``: the GeoNet export of Bansal et al.'s normals for the full NYU video set
  (training). Each file holds ``img`` (H, W, 3; stored minus twice the channel means, so the
  reader adds 2 x (122.175, 116.169, 103.508) and casts to uint8, wrapping as there), ``depth``
  (metres) and ``norm`` (H, W, 3); rows and columns beyond 480 x 640 are cut. Files are read in
  sorted order; with more than 21,181 of them (the full export) entries 21181 and 6919 of that
  order are dropped, Probe3D's "bad indices". ``trainval`` is every file, ``train`` / ``valid``
  the files whose index is not / is a multiple of 20.
- ``nyuv2/nyuv2_snorm_all.pkl``: the 1,449 labelled frames as one pickle: ``images`` (N, 3, H, W)
  uint8, ``depths`` (N, H, W) raw depth in metres, ``snorms`` (N, 3, H, W) Ladicky et al.'s
  normals, ``scene_types``, ``test_indices`` (FAIR's SSL-benchmark test split, 654 frames).

Depth beyond ``max_depth`` (10 m) reads 0, as both loaders set it; a pixel is valid where the
depth is > 0. The pickle is read once per reader (Probe3D holds it in memory too).
"""
from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np

from harness.config import fingerprint as _fingerprint
from harness.data.io import files_stamp
from harness.errors import DataError
from harness.registry import register_dataset

GEONET_DIR = "nyuv2_geonet"
TEST_PICKLE = "nyuv2/nyuv2_snorm_all.pkl"
GEONET_MEANS = (122.175, 116.169, 103.508)
BAD_GEONET_INDICES = (21181, 6919)  # nyu.py NYU_geonet: deleted in this order
SPLITS = ("trainval", "train", "valid", "test")
LAYOUT = (f"the Probe3D layout has {GEONET_DIR}/*.mat (training) and {TEST_PICKLE} (test) under the data root; "
          f"see data_processing/README.md of mbanani/probe3d")


def geonet_files(folder: Path, split: str) -> list[Path]:
    names = sorted(p.name for p in folder.iterdir() if p.suffix == ".mat")
    if len(names) > max(BAD_GEONET_INDICES):
        for i in BAD_GEONET_INDICES:
            del names[i]
    if split == "train":
        names = [n for i, n in enumerate(names) if i % 20 != 0]
    elif split == "valid":
        names = [n for i, n in enumerate(names) if i % 20 == 0]
    return [folder / n for n in names]


def _load_pickle(path: Path) -> dict:
    try:
        with open(path, "rb") as f:
            data = pickle.load(f)
    except (OSError, pickle.UnpicklingError, EOFError, ValueError) as exc:
        raise DataError(f"cannot read {path}: {exc}; rebuild it with Probe3D's create_nyu_pkl.py") from exc
    missing = {"images", "depths", "snorms", "test_indices"} - set(data if isinstance(data, dict) else {})
    if missing:
        raise DataError(f"{path} lacks {', '.join(sorted(missing))}: expected the dict create_nyu_pkl.py writes "
                        f"(images, depths, snorms, scene_types, train_indices, test_indices)")
    return data


@register_dataset("nyu_probe3d")
class NYUNormals:
    """``(root, split)``; ``load_image(i)`` uint8 (H, W, 3), ``load_depth(i)`` float32 (H, W) metres
    (0 = invalid), ``load_normals(i)`` float32 (3, H, W)."""

    name = "nyu_probe3d"
    thread_safe = True

    def __init__(self, root: str | Path, split: str = "trainval", max_depth: float = 10.0):
        if split not in SPLITS:
            raise DataError(f"nyu_probe3d split {split!r} is unknown; choose one of {', '.join(SPLITS)}")
        self.root, self.split, self.max_depth = Path(root), split, float(max_depth)
        self._test: dict | None = None
        if split == "test":
            path = self.root / TEST_PICKLE
            if not path.is_file():
                raise DataError(f"nyu_probe3d test file {path} not found: {LAYOUT}")
            self._test = _load_pickle(path)
            self.paths = [path]
            self.items = [int(i) for i in np.asarray(self._test["test_indices"]).ravel()]
        else:
            folder = self.root / GEONET_DIR
            if not folder.is_dir():
                raise DataError(f"nyu_probe3d training folder {folder} not found: {LAYOUT}")
            self.paths = geonet_files(folder, split)
            self.items = list(range(len(self.paths)))
        if not self.items:
            raise DataError(f"nyu_probe3d {split} split under {self.root} is empty: {LAYOUT}")
        self._check_first()

    def __len__(self) -> int:
        return len(self.items)

    def _check_first(self) -> None:
        img, depth, normals = self.load_image(0), self.load_depth(0), self.load_normals(0)
        if img.shape[:2] != depth.shape or normals.shape != (3, *depth.shape):
            raise DataError(f"{self.paths[0]}: image {img.shape}, depth {depth.shape} and normals {normals.shape} "
                            f"do not share one H x W (normals are 3 x H x W): {LAYOUT}")

    def _mat(self, i: int) -> dict:
        import scipy.io

        path = self.paths[i]
        try:
            mat = scipy.io.loadmat(path)
        except (OSError, ValueError) as exc:
            raise DataError(f"cannot read GeoNet file {path}: {exc}") from exc
        missing = {"img", "depth", "norm"} - set(mat)
        if missing:
            raise DataError(f"GeoNet file {path} lacks {', '.join(sorted(missing))}: each .mat holds img, depth "
                            f"and norm (GeoNet's NYU export)")
        return mat

    def load_image(self, i: int) -> np.ndarray:
        if self._test is not None:
            return np.ascontiguousarray(np.transpose(self._test["images"][self.items[i]], (1, 2, 0)))
        img = np.array(self._mat(i)["img"][:480, :640], dtype=np.float64)
        img += 2 * np.asarray(GEONET_MEANS)
        return img.astype(np.int64).astype(np.uint8)  # nyu.py: astype(uint8) of the float, wrapping

    def load_depth(self, i: int) -> np.ndarray:
        if self._test is not None:
            depth = np.array(self._test["depths"][self.items[i]], dtype=np.float32)
        else:
            depth = np.array(self._mat(i)["depth"][:480, :640], dtype=np.float32)
        depth[depth > self.max_depth] = 0
        return depth

    def load_normals(self, i: int) -> np.ndarray:
        if self._test is not None:
            return np.array(self._test["snorms"][self.items[i]], dtype=np.float32)
        return np.ascontiguousarray(np.transpose(self._mat(i)["norm"][:480, :640], (2, 0, 1)).astype(np.float32))

    def fingerprint(self) -> str:
        return _fingerprint({"dataset": self.name, "split": self.split, "max_depth": self.max_depth,
                             "files": [p.relative_to(self.root).as_posix() for p in self.paths],
                             "items": self.items if self._test is not None else len(self.items)})

    def stamp(self) -> str:
        return files_stamp(self.paths)
