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
