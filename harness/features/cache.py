"""The content-addressed feature cache: the key of an extraction (weights, data and its stamp,
transform, layers, precision, device) and the reading of a stored one (memory-mapped)."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from harness.config import fingerprint
from harness.data.io import content_stamp
from harness.features.contract import FeatureSet, ImageSource
from harness.models.handle import ModelHandle
from harness.runtime import device as devices

CACHE_VERSION = 1


def feature_key(model: ModelHandle, source: ImageSource, transform, n_last_blocks: int, final_norm: bool,
                patches: bool, patch_dtype: str, precision: str = "fp32") -> str:
    # A GPU's kernels round differently from the CPU's: features from each are kept apart;
    # so are those computed with TF32 matmuls (fp32 on CUDA is strict unless something set TF32).
    device_type = devices.module_device(model.backbone).type
    tf32 = device_type == "cuda" and devices.tf32_enabled()
    return fingerprint({
        "v": CACHE_VERSION, "weights": model.cache_key, "data": source.fingerprint(),
        "data_stamp": content_stamp(source),
        "transform": transform.fingerprint(), "n_last_blocks": n_last_blocks, "norm": final_norm,
        "patches": patches, "patch_dtype": patch_dtype, "precision": precision,
        "pos_interp": model.backbone.pos_interp_id,
        **({"device": device_type} if device_type != "cpu" else {}),
        **({"tf32": True} if tf32 else {}),
    }, length=24)


def load_feature_set(path: Path, key: str, in_memory: bool = False) -> FeatureSet:
    """The stored extraction in ``path`` (memory-mapped; read into memory with ``in_memory``)."""
    meta = json.loads((path / "meta.json").read_text())
    mode = None if in_memory else "r"
    fs = FeatureSet(cls=np.load(path / "cls.npy", mmap_mode=mode),
                    patch_mean=np.load(path / "patch_mean.npy", mmap_mode=mode),
                    grids=np.load(path / "grids.npy"), key=key, from_cache=True,
                    seconds=meta.get("seconds", 0.0), stages=meta.get("stages", {}))
    if meta["patches"]:
        fs.offsets = np.load(path / "offsets.npy")
        shape = (meta["total_patches"], meta["n_last_blocks"], meta["dim"])
        if in_memory:
            fs.patch_flat = np.fromfile(path / "patches.bin", dtype=meta["patch_dtype"]).reshape(shape)
        else:
            fs.patch_flat = np.memmap(path / "patches.bin", dtype=meta["patch_dtype"], mode="r", shape=shape)
    return fs
