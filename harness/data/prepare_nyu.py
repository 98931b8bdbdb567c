"""NYU Depth v2 from its official labelled download to the layout the ``nyu`` reader reads
(``ssl-bench data prepare nyu``), as BTS's ``utils/extract_official_train_test_set_from_mat.py``
converts it (the official test split that DINOv3's nyu_test.txt lists):

- ``nyu_depth_v2_labeled.mat`` (MATLAB v7.3, HDF5: ``images`` 1449 x 3 x 640 x 480, ``rawDepths``
  1449 x 640 x 480 in metres, ``sceneTypes`` references to the scene type of each frame) and
  ``splits.mat`` (``trainNdxs`` 795, ``testNdxs`` 654, 1-based);
- frame ``i`` (0-based) of the test split: ``<scene type>/rgb_%05d.jpg`` (the image with a 7-pixel
  black border, BTS's ``image_black_boundary``) and ``<scene type>/sync_depth_%05d.png`` (the raw
  depth x 1000 as uint16 millimetres); ``nyu_test.txt`` lists them ``/<rgb> /<depth> 518.8579``.

Difference, named: ``nyu_train.txt`` lists the 795 official labelled training frames (written under
``train/``), not the 24k raw-video frames of BTS's ``sync`` set that DINOv3 trains on (that set is
not an official download: add its folders and list by hand for the paper's training set). JPEGs are
written by PIL at quality 95 (BTS writes with OpenCV's default, 95): the test images' bytes may differ.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
from PIL import Image

from harness.data.prepare import Steps, require
from harness.errors import DataError

LABELLED, SPLITS = "nyu_depth_v2_labeled.mat", "splits.mat"
FOCAL = "518.8579"  # the focal length BTS's lists carry
BORDER = 7


def read_splits(path: Path) -> tuple[set[int], set[int]]:
    """(train, test) 1-based frame numbers of splits.mat."""
    from scipy.io import loadmat

    mat = loadmat(path)
    if "trainNdxs" not in mat or "testNdxs" not in mat:
        raise DataError(f"{path} holds no trainNdxs / testNdxs: not the official splits.mat")
    return {int(x) for x in np.ravel(mat["trainNdxs"])}, {int(x) for x in np.ravel(mat["testNdxs"])}


def _scene_types(h5) -> list[str]:
    return ["".join(chr(int(c)) for c in np.ravel(h5[ref])) for ref in h5["sceneTypes"][0]]


def write_frame(folder: Path, i: int, image_chw: np.ndarray, depth_m: np.ndarray) -> tuple[str, str]:
    """One frame as BTS writes it; (rgb, depth) paths relative to the root's parent folder."""
    folder.mkdir(parents=True, exist_ok=True)
    image = np.ascontiguousarray(np.transpose(image_chw, (2, 1, 0)))  # HDF5 (3, W, H) -> (H, W, 3)
    h, w = image.shape[:2]
    bordered = np.zeros_like(image)
    keep = (slice(BORDER, h - 6), slice(BORDER, w - 8))  # BTS's [7:474, 7:632] of a 480 x 640 frame
    bordered[keep] = image[keep]
    rgb, depth = folder / f"rgb_{i:05d}.jpg", folder / f"sync_depth_{i:05d}.png"
    Image.fromarray(bordered).save(rgb, quality=95)
    Image.fromarray((depth_m.T * 1000.0).astype(np.uint16)).save(depth)
    return rgb.name, depth.name


def prepare(steps: Steps) -> None:
    labelled, splits = require(steps.download, LABELLED, SPLITS)
    train, test = read_splits(splits)

    def convert(staging: Path) -> dict:
        try:
            import h5py
        except ImportError as exc:
            raise DataError("reading nyu_depth_v2_labeled.mat (MATLAB v7.3, HDF5) needs h5py: "
                            "pip install 'ssl-bench[prepare]'") from exc
        lines = {"train": [], "test": []}
        with h5py.File(labelled, "r") as h5:
            scenes = _scene_types(h5)
            images, depths = h5["images"], h5["rawDepths"]
            for i in range(images.shape[0]):
                split = "train" if i + 1 in train else "test" if i + 1 in test else None
                if split is None:
                    raise DataError(f"frame {i + 1} of {labelled.name} is in neither split of {splits.name}")
                rel = Path(scenes[i]) if split == "test" else Path("train") / scenes[i]
                rgb, depth = write_frame(staging / rel, i, images[i], depths[i])
                lines[split].append(f"/{(rel / rgb).as_posix()} /{(rel / depth).as_posix()} {FOCAL}")
        for split, entries in lines.items():
            (staging / f"nyu_{split}.txt").write_text("".join(f"{e}\n" for e in sorted(entries)))
        return {"train frames": len(lines["train"]), "test frames": len(lines["test"])}

    steps.run("labelled", convert)
