"""NYU Depth v2 in Probe3D's layout (``ssl-bench data prepare nyu:probe3d``; the ``nyu_probe3d``
reader), as mbanani/probe3d's ``data_processing/README.md`` and ``create_nyu_pkl.py`` make it:

- ``nyuv2/nyuv2_snorm_all.pkl``: one pickled dict of the 1,449 labelled frames of
  ``nyu_depth_v2_labeled.mat`` (MATLAB v7.3, read with h5py: ``images`` as (N, 3, H, W) uint8,
  ``rawDepths`` as (N, H, W) metres, ``scene_types``), Ladicky et al.'s normals from FAIR's SSL
  benchmark ``nyuv2_surfacenormal_metadata.zip`` (``surfacenormal_metadata/all_normals.pklz``: a
  gzipped pickle whose ``all_normals`` is (N, H, W, 3), stored as ``snorms`` (N, 3, H, W)), and
  ``train_indices`` / ``test_indices``: the leading number of each ``img`` of ``train_SN40.json`` /
  ``test_SN40.json``, minus one (654 test frames);
- ``nyuv2_geonet/*.mat``: GeoNet's training export (``data1.zip``, ``data2.zip`` of
  github.com/xjqi/GeoNet), every ``.mat`` of both archives in one folder; optional (without it the
  root holds the test split only).

Differences, named: ``scene_types`` is a list of strings (the converter stores what mat73 returns for
the cell array); the metadata zip may also be given extracted (its three files in the download). The
normals pickle is opened with an unpickler that builds only containers and numpy arrays.
"""
from __future__ import annotations

import gzip
import io
import json
import pickle
import zipfile
from pathlib import Path

import numpy as np

from harness.data.prepare import Steps, require
from harness.errors import DataError

LABELLED = "nyu_depth_v2_labeled.mat"
METADATA_ZIP = "nyuv2_surfacenormal_metadata.zip"
METADATA_FILES = ("all_normals.pklz", "train_SN40.json", "test_SN40.json")
GEONET_ZIPS = ("data1.zip", "data2.zip")
PICKLE = Path("nyuv2") / "nyuv2_snorm_all.pkl"
GEONET = "nyuv2_geonet"
_ARRAY_GLOBALS = {(m, n) for m in ("numpy.core.multiarray", "numpy._core.multiarray") for n in ("_reconstruct",)} | {
    ("numpy", "ndarray"), ("numpy", "dtype"), ("_codecs", "encode"),
    ("numpy.core.numeric", "_frombuffer"), ("numpy._core.numeric", "_frombuffer")}


class _ArrayUnpickler(pickle.Unpickler):
    def find_class(self, module, name):
        if (module, name) not in _ARRAY_GLOBALS:
            raise pickle.UnpicklingError(f"global {module}.{name} is not part of a normals file")
        return super().find_class(module, name)


def _metadata(download: Path) -> dict[str, bytes]:
    """The three metadata files by name, from the zip or as extracted in the download."""
    if (download / METADATA_ZIP).is_file():
        with zipfile.ZipFile(download / METADATA_ZIP) as zf:
            by_name = {Path(n).name: n for n in zf.namelist()}
            absent = [f for f in METADATA_FILES if f not in by_name]
            if absent:
                raise DataError(f"{download / METADATA_ZIP} lacks {', '.join(absent)}: not FAIR's metadata archive")
            return {f: zf.read(by_name[f]) for f in METADATA_FILES}
    if all((download / f).is_file() for f in METADATA_FILES):
        return {f: (download / f).read_bytes() for f in METADATA_FILES}
    raise DataError(f"{download} lacks {METADATA_ZIP} (FAIR's SSL benchmark: Ladicky's normals and the SN40 splits) "
                    f"or its extracted {', '.join(METADATA_FILES)}")


def read_normals(raw: bytes) -> np.ndarray:
    try:
        doc = _ArrayUnpickler(io.BytesIO(gzip.decompress(raw)), encoding="latin1").load()
    except (OSError, EOFError, pickle.UnpicklingError, ValueError) as exc:
        raise DataError(f"all_normals.pklz cannot be read ({exc}): not FAIR's gzipped normals pickle") from exc
    if not isinstance(doc, dict) or np.ndim(doc.get("all_normals")) != 4:
        raise DataError("all_normals.pklz holds no (N, H, W, 3) 'all_normals' array")
    return np.asarray(doc["all_normals"], dtype=np.float32)


def split_indices(raw: bytes, name: str) -> np.ndarray:
    """0-based frame indices of an SN40 split file (the number before the first '_' of each ``img``)."""
    try:
        return np.array([int(str(e["img"]).split("_")[0]) - 1 for e in json.loads(raw)], dtype=np.int64)
    except (ValueError, KeyError, TypeError) as exc:
        raise DataError(f"{name}: not a list of entries whose 'img' starts with the frame number ({exc})") from exc


def labelled_frames(path: Path) -> dict:
    try:
        import h5py
    except ImportError as exc:
        raise DataError("reading nyu_depth_v2_labeled.mat (MATLAB v7.3, HDF5) needs h5py: "
                        "pip install 'ssl-bench[prepare]'") from exc
    with h5py.File(path, "r") as h5:
        n, _, w, h = h5["images"].shape  # HDF5 holds MATLAB's arrays transposed: (N, 3, W, H)
        images, depths = np.empty((n, 3, h, w), np.uint8), np.empty((n, h, w), np.float32)
        for i in range(n):
            images[i] = np.transpose(h5["images"][i], (0, 2, 1))
            depths[i] = np.transpose(h5["rawDepths"][i])
        scenes = ["".join(chr(int(c)) for c in np.ravel(h5[ref])) for ref in h5["sceneTypes"][0]]
    return {"images": images, "depths": depths, "scene_types": scenes}


def _pickle_step(steps: Steps, labelled: Path, meta: dict[str, bytes]) -> None:
    def write(staging: Path) -> dict:
        frames = labelled_frames(labelled)
        normals = read_normals(meta["all_normals.pklz"])
        if normals.shape[:3] != frames["depths"].shape:
            raise DataError(f"all_normals.pklz holds normals {normals.shape} for the {frames['depths'].shape} frames "
                            f"of {LABELLED}: the files do not belong together")
        train, test = (split_indices(meta[f"{s}_SN40.json"], f"{s}_SN40.json") for s in ("train", "test"))
        n = len(frames["depths"])
        if min(train.min(), test.min()) < 0 or max(train.max(), test.max()) >= n:
            raise DataError(f"the SN40 split files name frames outside 1..{n} of {LABELLED}")
        doc = {"depths": frames["depths"], "images": frames["images"], "snorms": np.transpose(normals, (0, 3, 1, 2)),
               "scene_types": frames["scene_types"], "train_indices": train, "test_indices": test}
        (staging / PICKLE.parent).mkdir(parents=True)
        with open(staging / PICKLE, "wb") as f:
            pickle.dump(doc, f, protocol=4)  # the arrays of the full set exceed protocol 3's 4 GiB
        return {"frames": n, "train": len(train), "test": len(test)}

    steps.run("probe3d-labelled", write)


def _geonet_step(steps: Steps, zips: list[Path]) -> None:
    def extract(staging: Path) -> dict:
        folder = staging / GEONET
        folder.mkdir()
        written = 0
        for path in zips:
            try:
                with zipfile.ZipFile(path) as zf:
                    for name in zf.namelist():
                        if name.endswith(".mat") and not name.endswith("/"):
                            (folder / Path(name).name).write_bytes(zf.read(name))
                            written += 1
            except zipfile.BadZipFile as exc:
                raise DataError(f"{path} cannot be read ({exc}): download it again") from exc
        return {"GeoNet files": written}

    steps.run("probe3d-geonet", extract)


def prepare(steps: Steps) -> None:
    (labelled,) = require(steps.download, LABELLED)
    _pickle_step(steps, labelled, _metadata(steps.download))
    if any((steps.download / z).is_file() for z in GEONET_ZIPS):
        _geonet_step(steps, require(steps.download, *GEONET_ZIPS))  # both halves, or the training set is cut
    else:
        steps.log(f"  probe3d-geonet: no {' / '.join(GEONET_ZIPS)} in the download (GeoNet's training export): "
                  f"the root holds the test split only")
