"""normals_dpt: its declaration, parity of the DPT head's output, the angular loss and the metrics with
Probe3D's code (tests/fixtures/probe3d_dpt.json, shared with depth_dpt; tests/reference/
gen_probe3d_dpt.py), the protocol end to end on SynthScenes tiny (NYU and NAVI layouts) with a tiny
random ViT, and bad inputs refused with one clear error. The shared training loop, schedule, blocks and
the Probe3D layouts: tests/test_dpt_probe.py."""
from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from benchmarks.normals.losses import angular_loss
from benchmarks.normals.metrics import normal_metrics
from benchmarks.normals.protocol import NormalsDPT
from dpt_parity import check_sampled, load_official, official_head, probe3d_tiny
from harness.cli import main
from harness.errors import ConfigError
from harness.models.handle import ModelHandle
from harness.per_image import decode_array
from harness.probes.dpt_head import DPTHead, official_state_dict
from harness.registry import declaration

QUICK = {"epochs": 2, "warmup_epochs": 0.5, "hidden_dim": 8, "progress": False}


pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def official():
    return load_official()


@pytest.fixture(scope="module")
def synth_tiny(tmp_path_factory) -> Path:
    return probe3d_tiny(tmp_path_factory)


def _copy(src: Path, dst: Path) -> Path:
    out = dst / "copy"
    shutil.copytree(src, out)
    return out


def test_declaration_states_each_metric_direction():
    normals = {m.name: m.direction for m in declaration("normals_dpt").metrics}
    assert normals == {"angular_rmse": "lower", "within_11_25": "higher", "within_22_5": "higher",
                       "within_30": "higher", "mean_angle": "lower", "median_angle": "lower"}
    assert declaration("normals_dpt").headline_metric == "angular_rmse"


def test_normals_head_loss_and_metrics_match_the_official_code(official):
    data, arrays = official
    ref = data["normals"]
    torch.manual_seed(0)
    fresh = DPTHead([6] * 4, 4, hidden_dim=8, kernel_size=3)  # the same seed gives the official init
    for k, v in official_state_dict(fresh).items():  # equal up to another CPU's rounding of the init bounds
        np.testing.assert_allclose(v.numpy(), arrays[f"normals_head.{k}"], rtol=1e-5, atol=1e-7)
    head = official_head(arrays, "normals_head", 4)
    with torch.no_grad():
        raw = head([torch.from_numpy(f) for f in arrays["feats"]])
    check_sampled(raw, ref["raw"])
    pred = F.interpolate(raw, size=(44, 52), mode="bicubic", align_corners=True)
    check_sampled(pred, ref["pred"])
    # loss and metrics on the official prediction (stored), so that only their own arithmetic is compared
    stored = torch.from_numpy(arrays["normals_pred"])
    normals, valid = torch.from_numpy(arrays["normals"]), torch.from_numpy(arrays["valid"])[:, 0]
    assert float(angular_loss(stored, normals, valid)) == pytest.approx(ref["loss_uncertainty"], rel=1e-5)
    assert float(angular_loss(stored[:, :3], normals, valid)) == pytest.approx(ref["loss_plain"], rel=1e-5)
    ours = normal_metrics(stored, normals, valid)
    names = {"angular_rmse": "rmse", "within_11_25": "d1", "within_22_5": "d2", "within_30": "d3"}
    for mine, theirs in names.items():
        np.testing.assert_allclose(ours[mine].double().numpy(), ref["metrics"][theirs], rtol=1e-5, atol=1e-7)
    assert float(ours["mean_angle"][1]) == 0.0  # the image without a valid pixel counts with zeros, as there


def test_normals_on_navi_synthscenes_end_to_end(synth_tiny):
    model = ModelHandle.random_init("vit_cpu_tiny", seed=0)
    (res,) = NormalsDPT.from_preset("synth_navi", {**QUICK, "epochs": 1}).run(model, synth_tiny)
    assert res.dataset == "navi_probe3d" and res.per_image["images"] == 6
    assert 0 < res.metrics["angular_rmse"] < 180


def test_normals_protocol_end_to_end_on_synthscenes_tiny(synth_tiny):
    model = ModelHandle.random_init("vit_cpu_tiny", seed=0)
    (res,) = NormalsDPT.from_preset("synth", QUICK).run(model, synth_tiny)
    m = res.metrics
    assert set(m) == {"angular_rmse", "mean_angle", "median_angle", "within_11_25", "within_22_5", "within_30"}
    assert 0 < m["mean_angle"] <= m["angular_rmse"] < 180
    assert 0 <= m["within_11_25"] <= m["within_22_5"] <= m["within_30"] <= 100
    block = res.per_image
    assert block["kind"] == "means" and block["images"] == 8
    values = decode_array(block["values"])
    for j, name in enumerate(block["metrics"]):
        assert values[:, j].mean() == pytest.approx(m[name], rel=1e-9)
    assert res.params["blocks"] == [0, 1, 1, 2] and res.params["steps"] == 2 * 3


def test_a_three_block_model_needs_named_blocks(synth_tiny):
    model = ModelHandle.random_init("vit_cpu_tiny", seed=0)
    with pytest.raises(ConfigError, match=r"model random_init-vit_cpu_tiny has 3 block.*set blocks=\[0,0,0,2\]"):
        NormalsDPT.from_preset("probe3d", {"progress": False}).run(model, synth_tiny)


def test_cli_bad_layout_one_error_line_exit_2_no_record(synth_tiny, isolated_home, capsys):
    root = _copy(synth_tiny, isolated_home)
    (root / "nyuv2" / "nyuv2_snorm_all.pkl").unlink()
    rc = main(["--threads", "1", "eval", "--protocol", "normals_dpt", "--preset", "synth", "--dataset",
               "nyu:probe3d", "--data-root", str(root), "--random-init", "vit_cpu_tiny", "--set", "progress=false"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and err[0].startswith("error:") and "nyuv2_snorm_all.pkl" in err[0]
    runs = isolated_home / "results" / "runs"
    assert not runs.exists() or not any(runs.iterdir())


def test_a_record_through_the_runner_keeps_per_image_means(synth_tiny, isolated_home):
    from harness.running.evaluate import evaluate

    model = ModelHandle.random_init("vit_cpu_tiny", seed=0)
    proto = NormalsDPT.from_preset("synth", {**QUICK, "epochs": 1, "warmup_epochs": 0.5})
    (rec,), skipped = evaluate(model, proto, synth_tiny, preset="synth")
    assert not skipped and rec["metrics"]["angular_rmse"] > 0
    assert rec["per_image"]["kind"] == "means" and rec["per_image"]["images"] == 8
    (again,), skipped = evaluate(model, proto, synth_tiny, preset="synth")
    assert skipped and again["metrics"] == rec["metrics"]
