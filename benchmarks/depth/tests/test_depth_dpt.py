"""depth_dpt: its declaration, parity of the DPT head's binned depth, the depth loss and the metrics
(plain and scale-aligned) with Probe3D's code (tests/fixtures/probe3d_dpt.json, shared with
normals_dpt; tests/reference/gen_probe3d_dpt.py), and the protocol end to end on SynthScenes tiny
with a tiny random ViT. The shared training loop, schedule, blocks and the Probe3D layouts:
tests/test_dpt_probe.py."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from benchmarks.depth.dpt_losses import depth_loss
from benchmarks.depth.dpt_metrics import depth_metrics
from benchmarks.depth.protocol_dpt import DepthDPT
from dpt_parity import check_sampled, load_official, official_head, probe3d_tiny
from harness.models.handle import ModelHandle
from harness.probes.depth_bins import bins_to_depth
from harness.registry import declaration

QUICK = {"epochs": 2, "warmup_epochs": 0.5, "hidden_dim": 8, "progress": False}


pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def official():
    return load_official()


@pytest.fixture(scope="module")
def synth_tiny(tmp_path_factory) -> Path:
    return probe3d_tiny(tmp_path_factory)


def probe_depth(logits: torch.Tensor) -> torch.Tensor:
    """Probe3D's 256 linear bins over 0.001-10 m, in the scores' dtype (probes.py DepthBinPrediction)."""
    return bins_to_depth(logits, 0.001, 10.0, "linear", "linear", centres_dtype=logits.dtype)


def test_declaration_states_each_metric_direction():
    depth = {m.name: m.direction for m in declaration("depth_dpt").metrics}
    assert depth == {"rmse": "lower", "delta1": "higher", "delta2": "higher", "delta3": "higher"}
    assert declaration("depth_dpt").headline_metric == "rmse"


def test_depth_head_loss_and_metrics_match_the_official_code(official):
    data, arrays = official
    ref = data["depth"]
    head = official_head(arrays, "depth_head", 256)
    with torch.no_grad():
        raw = probe_depth(head([torch.from_numpy(f) for f in arrays["feats"]]))
    check_sampled(raw, ref["raw"])
    pred = F.interpolate(raw, size=(44, 52), mode="bilinear", align_corners=True)
    check_sampled(pred, ref["pred"])
    gt = torch.from_numpy(arrays["depth"])
    assert float(depth_loss(pred, gt.clone())) == pytest.approx(ref["loss"], rel=1e-5)
    # the metrics on the official prediction (stored): a random head's depth is nearly flat, and the
    # scale-and-shift fit of the aligned metrics multiplies its float32 rounding by a large scale
    stored = torch.from_numpy(arrays["depth_pred"])
    for aligned, key in ((False, "metrics"), (True, "metrics_aligned")):
        ours = depth_metrics(stored, gt, scale_invariant=aligned)
        for name in ("rmse", "delta1", "delta2", "delta3"):
            theirs = ref[key]["d" + name[-1] if name.startswith("delta") else name]
            np.testing.assert_allclose(ours[name].double().numpy(), theirs, rtol=1e-5, atol=1e-7)


def test_depth_protocol_end_to_end_on_synthscenes_tiny(synth_tiny):
    model = ModelHandle.random_init("vit_cpu_tiny", seed=0)
    (res,) = DepthDPT.from_preset("synth", {**QUICK, "epochs": 1, "warmup_epochs": 0.5, "n_bins": 16}).run(
        model, synth_tiny)
    m = res.metrics
    assert set(m) == {"rmse", "delta1", "delta2", "delta3"} and 0 < m["rmse"] < 10
    assert m["delta1"] <= m["delta2"] <= m["delta3"] <= 100
    assert res.per_image["images"] == 8 and res.per_image["metrics"] == ["rmse", "delta1", "delta2", "delta3"]
    other = res.params["other_metrics"]
    assert set(other) == {"rmse_aligned", "delta1_aligned", "delta2_aligned", "delta3_aligned"}
    assert 0 < other["rmse_aligned"] <= m["rmse"] + 1e-9 and other["delta3_aligned"] <= 100
