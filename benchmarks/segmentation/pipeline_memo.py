"""mmseg's data pipeline with its samples kept for the next model of the same process.

Every model a suite (or a smoke test) trains a head for in one process reads the same images
through the same random augmentations: mmengine's runner seeds numpy, ``random`` and torch at its
start, and without loader workers only the transforms draw from them. So the second model's
samples are the first's, and a sample is kept by what decides it: the transforms, the sample's
data info and files, and the state of every generator a transform may draw from. A hit sets the
generators to the states the transforms left them in, so everything after draws the same numbers
as without the memo; a run whose draws differ (other seeds, other transforms) only misses.
"""
from __future__ import annotations

import copy
import os
import random
from collections import OrderedDict

import numpy as np
import torch

MEMO_TYPE = "SslBenchMemoPipeline"
# what the kept samples may take: a SynthScenes 64 px sample holds about 48 KB (its label map is
# int64), so the 9,600 samples and 400 validation images of a 600-iteration `synth` run fit. Nothing
# is evicted once it is full: a second model asks for the samples in the first one's order, where
# an LRU would drop each just before it is asked for.
MEMO_BYTES = 512 * 2**20

_MEMO: OrderedDict = OrderedDict()
_SIZE = [0]
_REGISTERED = [False]


def memo_pipeline(transforms: list[dict]) -> list[dict]:
    """The pipeline ``transforms`` as one memoised step (config dicts, as mmseg's datasets take them)."""
    return [dict(type=MEMO_TYPE, transforms=transforms)]


def clear() -> None:
    _MEMO.clear()
    _SIZE[0] = 0


def _generators() -> tuple:
    return np.random.get_state(), random.getstate(), torch.random.get_rng_state()


def _set_generators(states: tuple) -> None:
    np.random.set_state(states[0])
    random.setstate(states[1])
    torch.random.set_rng_state(states[2])


def _files(results: dict) -> tuple:
    paths = [results.get(k) for k in ("img_path", "seg_map_path")]
    return tuple((p, os.stat(p).st_mtime_ns, os.stat(p).st_size) for p in paths if isinstance(p, str))


def _key(name: str, results: dict) -> tuple:
    np_state, py_state, torch_state = _generators()
    return (name, repr(sorted(results.items(), key=lambda kv: kv[0])), _files(results),
            np_state[1].tobytes(), np_state[2:], hash(py_state), torch_state.numpy().tobytes())


def _nbytes(out) -> int:
    if out is None:
        return 0
    tensors = [out.get("inputs")]
    sample = out.get("data_samples")
    if sample is not None and "gt_sem_seg" in sample:
        tensors.append(sample.gt_sem_seg.data)
    return 4096 + sum(int(t.numel() * t.element_size()) for t in tensors if isinstance(t, torch.Tensor))


def register_memo_pipeline() -> None:
    """Register the memoised pipeline step in mmseg's TRANSFORMS registry (idempotent)."""
    if _REGISTERED[0]:
        return
    from mmengine.dataset import Compose
    from mmseg.registry import TRANSFORMS

    @TRANSFORMS.register_module(name=MEMO_TYPE)
    class MemoPipeline:
        def __init__(self, transforms: list[dict]):
            self.name = repr(transforms)
            self.compose = Compose(transforms)

        def __call__(self, results: dict):
            key = _key(self.name, results)
            if key in _MEMO:
                out, after = _MEMO[key]
                _set_generators(after)
                return copy.deepcopy(out)
            out = self.compose(results)
            size = _nbytes(out)
            if _SIZE[0] + size <= MEMO_BYTES:
                _MEMO[key] = (copy.deepcopy(out), _generators())
                _SIZE[0] += size
            return out

    _REGISTERED[0] = True
