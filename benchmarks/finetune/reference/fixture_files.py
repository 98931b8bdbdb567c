"""The committed parity fixtures (benchmarks/finetune/fixtures/), read after their sha256 is
checked against MANIFEST.json, and the one map from the official model's parameter names to
the fine-tuned classifier's."""
from __future__ import annotations

import hashlib
import json
from functools import lru_cache
from pathlib import Path

import numpy as np

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
MANIFEST = FIXTURES / "MANIFEST.json"


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def manifest() -> dict:
    return json.loads(MANIFEST.read_text())


def checked(name: str) -> Path:
    """The fixture's path, once its bytes match the manifest (a swapped file is refused)."""
    path = FIXTURES / name
    want = manifest()["sha256"].get(name)
    if want is None:
        raise KeyError(f"{name} is not in {MANIFEST}")
    got = sha256(path)
    if got != want:
        raise ValueError(f"{path}: sha256 {got} is not the manifest's {want}; regenerate with "
                         f"{manifest()['generator']} or restore the committed file")
    return path


@lru_cache(maxsize=None)
def load_json(name: str) -> dict:
    return json.loads(checked(name).read_text())


@lru_cache(maxsize=None)
def load_arrays(name: str) -> dict[str, np.ndarray]:
    with np.load(checked(name)) as data:
        return {k: data[k] for k in data.files}


def project_name(official: str) -> str:
    """iBOT's ``VisionTransformer`` keeps the backbone and the head in one module; the fine-tuned
    classifier (benchmarks/finetune/model.py) holds the backbone under ``backbone.`` and ``head`` /
    ``fc_norm`` beside it. The names under the prefix are the official ones (the harness ViT is
    timm's, whose names iBOT's checkpoints use)."""
    if official.startswith(("head.", "fc_norm.")):
        return official
    return "backbone." + official


def synthetic_photo(seed: int, width: int = 300, height: int = 260):
    """A deterministic RGB test image (random colour blocks, bilinearly enlarged: PIL's integer
    resampling gives the same bytes on any machine), the input of the transform fixture."""
    from PIL import Image

    rng = np.random.default_rng(seed)
    blocks = rng.integers(0, 256, (height // 20 + 1, width // 20 + 1, 3), dtype=np.uint8)
    return Image.fromarray(blocks).resize((width, height), Image.BILINEAR)


# flat indices of the transformed tensor recorded in the transform fixture
TRANSFORM_PROBES = (0, 1, 1000, 5000, 20000, 50000, 100000, -1)


def tensor_digest(x) -> dict:
    """Shape, sum, sum of |x|, per-channel mean and a few entries of an image tensor."""
    flat = x.double().flatten()
    return {"shape": list(x.shape), "sum": float(flat.sum()), "abs_sum": float(flat.abs().sum()),
            "channel_mean": [float(c.double().mean()) for c in x],
            "probes": [float(flat[i % flat.numel()]) for i in TRANSFORM_PROBES]}
