"""What the DPT probe tests share (tests/test_dpt_probe.py and the depth and normals folders' tests):
Probe3D's recorded outputs (tests/fixtures/probe3d_dpt.json with its input arrays), a DPT head loaded
with the official weights, the check of a tensor against its recorded samples and sums, and SynthScenes
tiny in Probe3D's layouts."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from harness.data.synthetic_probe3d import generate
from harness.probes.dpt_head import DPTHead, official_state_dict

FIXTURES = Path(__file__).parent / "fixtures"
# float32 kernels (convolutions, bicubic resampling) differ between CPUs in the last bits; the head's
# outputs are O(0.1-1) and pass through 9 convolutions: 1e-5 relative holds them.
RTOL, ATOL = 1e-5, 1e-6


def load_official() -> tuple[dict, dict]:
    """The fixture's JSON and its input arrays."""
    data = json.loads((FIXTURES / "probe3d_dpt.json").read_text())
    arrays = dict(np.load(FIXTURES / data["provenance"]["hyperparameters"]["inputs"]))
    return data, arrays


def probe3d_tiny(tmp_path_factory) -> Path:
    """SynthScenes tiny in Probe3D's NYU and NAVI layouts (not the core set of tests/conftest.py)."""
    return generate(tmp_path_factory.mktemp("probe3d") / "tiny", preset="tiny", seed=0, progress=False)


def official_head(arrays, prefix: str, out_dim: int) -> DPTHead:
    """The small DPT head of the fixture, with the official weights stored under ``prefix``."""
    head = DPTHead([6] * 4, out_dim, hidden_dim=8, kernel_size=3)
    names = official_state_dict(head)
    ours = dict(zip(names, head.state_dict()))  # official name -> ours
    head.load_state_dict({ours[k]: torch.from_numpy(arrays[f"{prefix}.{k}"]) for k in names}, strict=True)
    return head


def check_sampled(t: torch.Tensor, ref: dict) -> None:
    """``t`` against the fixture's record of it: shape, sampled values, sum and sum of squares."""
    flat = t.detach().double().flatten()
    assert list(t.shape) == ref["shape"]
    np.testing.assert_allclose(flat[ref["index"]].numpy(), ref["values"], rtol=RTOL, atol=ATOL)
    assert float(flat.sum()) == pytest.approx(ref["sum"], rel=1e-5, abs=1e-4)
    assert float((flat ** 2).sum()) == pytest.approx(ref["sum_sq"], rel=1e-5)
