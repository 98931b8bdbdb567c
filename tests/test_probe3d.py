"""Probe3D's dense probes (normals_dpt, depth_dpt): the declarations, parity of the DPT head, the
losses, the metrics, the schedule and the padding with the official code (tests/fixtures/
probe3d_normals.json, from tests/reference/gen_probe3d_normals.py), SynthScenes in Probe3D's NYU
layout, both protocols end to end on SynthScenes tiny with a tiny random ViT, and bad inputs each
refused with one clear error."""
from __future__ import annotations

import json
import pickle
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from benchmarks.probe3d.features import blocks_for, center_padding, chosen_blocks, probe3d_blocks
from benchmarks.probe3d.head import DPTHead, bins_to_depth, official_state_dict
from benchmarks.probe3d.losses import angular_loss, depth_loss
from benchmarks.probe3d.metrics import depth_metrics, normal_metrics
from benchmarks.probe3d.protocol import DepthDPT, NormalsDPT
from benchmarks.probe3d.reader import NYUNormals
from benchmarks.probe3d.reader_navi import NAVIFrames
from benchmarks.probe3d.synthetic import generate, render
from benchmarks.probe3d.training import Frames, schedule_factor
from harness.cli import main
from harness.errors import ConfigError, DataError, NotApplicable
from harness.models.handle import ModelHandle
from harness.per_image import decode_array
from harness.registry import declaration

FIXTURES = Path(__file__).parent / "fixtures"
QUICK = {"epochs": 2, "warmup_epochs": 0.5, "hidden_dim": 8, "progress": False}
# float32 kernels (convolutions, bicubic resampling) differ between CPUs in the last bits; the head's
# outputs are O(0.1-1) and pass through 9 convolutions: 1e-5 relative holds them, 1e-4 the metrics'
# thresholded counts are exact except a pixel on a threshold (none within 1e-4 degrees here).
RTOL, ATOL = 1e-5, 1e-6


pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def official():
    data = json.loads((FIXTURES / "probe3d_normals.json").read_text())
    arrays = dict(np.load(FIXTURES / data["provenance"]["hyperparameters"]["inputs"]))
    return data, arrays


@pytest.fixture(scope="module")
def synth_tiny(tmp_path_factory) -> Path:
    return generate(tmp_path_factory.mktemp("probe3d") / "tiny", preset="tiny", seed=0, progress=False)


def _head(arrays, prefix: str, out_dim: int) -> DPTHead:
    head = DPTHead([6] * 4, out_dim, hidden_dim=8, kernel_size=3)
    names = official_state_dict(head)
    ours = dict(zip(names, head.state_dict()))  # official name -> ours
    head.load_state_dict({ours[k]: torch.from_numpy(arrays[f"{prefix}.{k}"]) for k in names}, strict=True)
    return head


def _check_sampled(t: torch.Tensor, ref: dict) -> None:
    flat = t.detach().double().flatten()
    assert list(t.shape) == ref["shape"]
    np.testing.assert_allclose(flat[ref["index"]].numpy(), ref["values"], rtol=RTOL, atol=ATOL)
    assert float(flat.sum()) == pytest.approx(ref["sum"], rel=1e-5, abs=1e-4)
    assert float((flat ** 2).sum()) == pytest.approx(ref["sum_sq"], rel=1e-5)


# ----------------------------------------------------------------------------- declarations
def test_declarations_state_each_metric_direction():
    normals = {m.name: m.direction for m in declaration("normals_dpt").metrics}
    assert normals == {"angular_rmse": "lower", "within_11_25": "higher", "within_22_5": "higher",
                       "within_30": "higher", "mean_angle": "lower", "median_angle": "lower"}
    assert declaration("normals_dpt").headline_metric == "angular_rmse"
    depth = {m.name: m.direction for m in declaration("depth_dpt").metrics}
    assert depth == {"rmse": "lower", "delta1": "higher", "delta2": "higher", "delta3": "higher"}


# ----------------------------------------------------------------------------- parity with Probe3D
def test_normals_head_loss_and_metrics_match_the_official_code(official):
    data, arrays = official
    ref = data["normals"]
    torch.manual_seed(0)
    fresh = DPTHead([6] * 4, 4, hidden_dim=8, kernel_size=3)  # the same seed gives the official init
    for k, v in official_state_dict(fresh).items():  # equal up to another CPU's rounding of the init bounds
        np.testing.assert_allclose(v.numpy(), arrays[f"normals_head.{k}"], rtol=1e-5, atol=1e-7)
    head = _head(arrays, "normals_head", 4)
    with torch.no_grad():
        raw = head([torch.from_numpy(f) for f in arrays["feats"]])
    _check_sampled(raw, ref["raw"])
    pred = F.interpolate(raw, size=(44, 52), mode="bicubic", align_corners=True)
    _check_sampled(pred, ref["pred"])
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


def test_depth_head_loss_and_metrics_match_the_official_code(official):
    data, arrays = official
    ref = data["depth"]
    head = _head(arrays, "depth_head", 256)
    with torch.no_grad():
        raw = bins_to_depth(head([torch.from_numpy(f) for f in arrays["feats"]]), 0.001, 10.0)
    _check_sampled(raw, ref["raw"])
    pred = F.interpolate(raw, size=(44, 52), mode="bilinear", align_corners=True)
    _check_sampled(pred, ref["pred"])
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


@pytest.mark.parametrize("task", ["normals", "depth"])
def test_training_steps_and_validation_match_the_official_loop(official, task):
    """Two epochs of three batches through train_snorm.py / train_depth.py train() (LambdaLR, AdamW),
    then validate(), from the same initial weights and stored features: each step's lr and loss, the
    trained probe's output and the per-image metrics. Adam's normalised steps carry float32 rounding
    differences of the kernels forward, so 1e-4 relative on the trained output."""
    data, arrays = official
    ref = data["training"][task]
    proto = (NormalsDPT if task == "normals" else DepthDPT).from_preset("probe3d", {"progress": False})
    head = _head(arrays, f"{task}_head", 4 if task == "normals" else 256)
    opt = torch.optim.AdamW(head.parameters(), lr=proto.cfg.lr, weight_decay=proto.cfg.weight_decay)
    feats = torch.from_numpy(arrays["train_feats"])
    depth, normals = torch.from_numpy(arrays["train_depth"]), torch.from_numpy(arrays["train_normals"])
    lrs, losses, step = [], [], 0
    for _ in range(2):
        for b in range(3):
            lrs.append(proto.cfg.lr * schedule_factor(step, 6, 4.5))
            losses.append(proto.train_step(head, opt, list(feats[b]), depth[b].clone(), normals[b], lrs[-1]))
            step += 1
    np.testing.assert_allclose(lrs, ref["lr"], rtol=1e-12)
    np.testing.assert_allclose(losses, ref["loss"], rtol=1e-5)
    with torch.no_grad():
        out = head(list(feats[0]))
        _check_sampled_loose(out if task == "normals" else bins_to_depth(out, 0.001, 10.0), ref["trained_output"])
        rows = [proto.metrics(proto.predict(head, list(feats[b]), depth.shape[-2:]), depth[b], normals[b])
                for b in range(3)]
    names = ({"angular_rmse": "rmse", "within_11_25": "d1", "within_22_5": "d2", "within_30": "d3"} if task == "normals"
             else {"rmse": "rmse", "delta1": "d1", "delta2": "d2", "delta3": "d3"})
    for mine, theirs in names.items():
        ours = torch.cat([r[mine] for r in rows]).double().numpy()
        np.testing.assert_allclose(ours, ref["val_metrics"][theirs], rtol=1e-4, atol=1e-6)
        if task == "depth":  # the scale fit amplifies rounding (see above): a pixel or two may cross a threshold
            ours = torch.cat([r[f"{mine}_aligned"] for r in rows]).double().numpy()
            np.testing.assert_allclose(ours, ref["val_metrics_aligned"][theirs], rtol=1e-3, atol=2e-3)


def _check_sampled_loose(t: torch.Tensor, ref: dict) -> None:
    flat = t.detach().double().flatten()
    np.testing.assert_allclose(flat[ref["index"]].numpy(), ref["values"], rtol=1e-4, atol=1e-5)


def test_schedule_and_padding_match_the_official_code(official):
    data, _ = official
    steps, factors = data["schedule"]["steps"], data["schedule"]["factor"]
    np.testing.assert_allclose([schedule_factor(s, 100, 15) for s in steps], factors, rtol=1e-12)
    for shape, padded in zip(data["center_padding"]["shapes"], data["center_padding"]["padded"]):
        assert list(center_padding(torch.zeros(1, 1, *shape), 16).shape[-2:]) == padded


def test_block_choice_is_probe3d_s_and_refuses_too_shallow_models():
    assert probe3d_blocks(12) == [2, 5, 8, 11] and probe3d_blocks(24) == [5, 11, 17, 23]
    with pytest.raises(ConfigError, match=r"model r18 has 3 block\(s\), too few .* set blocks=\[0,0,0,2\] "
                                          r"\(eval: --set blocks=\[0,0,0,2\]; run: --set normals_dpt.blocks="):
        chosen_blocks(None, 3, "normals_dpt", "r18")
    with pytest.raises(NotApplicable, match=r"has 1 block.*set blocks=\[0,0,0,0\]"):
        chosen_blocks([0, 1, 2, 3], 1, "normals_dpt")
    assert chosen_blocks(blocks_for(1), 1, "depth_dpt") == [0, 0, 0, 0]
    assert chosen_blocks(blocks_for(3), 3, "depth_dpt") == [0, 0, 0, 2]
    for bad in ([0, 1, 2], [2, 1, 1, 2], [-1, 0, 1, 2]):
        with pytest.raises(ConfigError, match="four non-negative indices"):
            chosen_blocks(bad, 3, "normals_dpt")


# ----------------------------------------------------------------------------- data
def test_synthscenes_round_trip_through_the_probe3d_layout(synth_tiny):
    assert generate(synth_tiny, preset="tiny", seed=0) == synth_tiny  # idempotent
    img, depth, normals = render(np.random.default_rng([0, 0, 3]), 60, 80)
    np.testing.assert_allclose(np.linalg.norm(normals, axis=0), 1.0, atol=1e-5)
    train = NYUNormals(synth_tiny, "trainval")
    assert len(train) == 24 and len(NYUNormals(synth_tiny, "test")) == 8
    assert len(NYUNormals(synth_tiny, "train")) + len(NYUNormals(synth_tiny, "valid")) == 24
    i = [p.name for p in train.paths].index("room_3_0003_0-000003.mat")
    np.testing.assert_array_equal(train.load_image(i), img)  # GeoNet's mean offset undone
    np.testing.assert_allclose(train.load_depth(i), depth)
    np.testing.assert_allclose(train.load_normals(i), normals)
    test_depth = NYUNormals(synth_tiny, "test").load_depth(0)
    assert (test_depth == 0).any() and (test_depth > 0).mean() > 0.7  # holes in the test frames


def test_navi_frames_match_the_official_loader(synth_tiny):
    """navi.py NAVI items (not augmented, 512 x 512) on the NAVI part of SynthScenes tiny: the
    instances of each split (every 4th) and, for three frames, the normalised image, the depth and
    the normals computed from it. Nearest resampling and crops are exact; the normals' float32
    cross products agree to 1e-5."""
    data = json.loads((FIXTURES / "probe3d_navi.json").read_text())["frames"]
    cfg = NormalsDPT.from_preset("probe3d_navi", {"progress": False}).cfg
    for split, ref in data.items():
        reader = NAVIFrames(synth_tiny, split)
        assert [[f.parent.name, f.name, v] for f, v, _ in reader.items] == ref["instances"]
        frames = Frames(reader, cfg)
        for i, want in enumerate(ref["frames"]):
            image, depth, normals = frames[i]
            for got, key in ((image, "image"), (depth, "depth"), (normals, "snorm")):
                flat = got.double().flatten()
                assert list(got.shape) == want[key]["shape"], key
                np.testing.assert_allclose(flat[want[key]["index"]].numpy(), want[key]["values"], rtol=1e-5,
                                           atol=1e-5, err_msg=f"{split} {i} {key}")
                assert float(flat.sum()) == pytest.approx(want[key]["sum"], rel=1e-5, abs=1e-3)


def test_navi_layout_errors_name_the_fix(synth_tiny, tmp_path):
    with pytest.raises(DataError, match="no NAVI object with a wild_set"):
        NAVIFrames(tmp_path, "test")
    root = _copy(synth_tiny, tmp_path)
    (root / "synth_object_0" / "wild_set" / "annotations.json").write_text("not json")
    with pytest.raises(DataError, match="cannot read NAVI annotations"):
        NAVIFrames(root, "test")


def test_normals_on_navi_synthscenes_end_to_end(synth_tiny):
    model = ModelHandle.random_init("vit_cpu_tiny", seed=0)
    (res,) = NormalsDPT.from_preset("synth_navi", {**QUICK, "epochs": 1}).run(model, synth_tiny)
    assert res.dataset == "navi_probe3d" and res.per_image["images"] == 6
    assert 0 < res.metrics["angular_rmse"] < 180


def _copy(src: Path, dst: Path) -> Path:
    out = dst / "copy"
    shutil.copytree(src, out)
    return out


def test_bad_layouts_are_refused_naming_the_file(synth_tiny, tmp_path):
    with pytest.raises(DataError, match="nyuv2_geonet"):
        NYUNormals(tmp_path, "trainval")
    with pytest.raises(DataError, match="nyuv2_snorm_all.pkl"):
        NYUNormals(tmp_path, "test")
    with pytest.raises(DataError, match="split 'val' is unknown"):
        NYUNormals(synth_tiny, "val")
    root = _copy(synth_tiny, tmp_path)
    with open(root / "nyuv2" / "nyuv2_snorm_all.pkl", "wb") as f:
        pickle.dump({"images": np.zeros((1, 3, 4, 4), np.uint8)}, f)
    with pytest.raises(DataError, match="lacks depths, snorms, test_indices"):
        NYUNormals(root, "test")
    import scipy.io

    first = sorted((root / "nyuv2_geonet").iterdir())[0]
    scipy.io.savemat(first, {"img": np.zeros((4, 4, 3)), "depth": np.zeros((4, 4))})
    with pytest.raises(DataError, match="lacks norm"):
        NYUNormals(root, "trainval")


# ----------------------------------------------------------------------------- the protocols
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


@pytest.mark.parametrize("protocol", [NormalsDPT, DepthDPT])
def test_examples_show_input_truth_prediction_and_error(synth_tiny, protocol):
    model = ModelHandle.random_init("vit_cpu_tiny", seed=0)
    proto = protocol.from_preset("synth", {**QUICK, "epochs": 1, "n_bins": 8})
    examples = proto.examples(model, synth_tiny, count=2, seed=0)
    assert len(examples) == 2
    labels = [p.label for p in examples[0].panels]
    assert labels[:3] == ["input", "ground truth", "prediction"] and "error" in labels[3]
    assert examples[0].panels[2].text.startswith("RMSE")


@pytest.fixture(scope="module")
def probe3d_small(tmp_path_factory) -> Path:
    """The small set, drawn once for both protocols below."""
    return generate(tmp_path_factory.mktemp("probe3d") / "small", preset="small", seed=0, progress=False)


@pytest.mark.slow
@pytest.mark.xdist_group("probe3d_small")  # one worker draws the set for both
@pytest.mark.parametrize("protocol,metric", [(NormalsDPT, "angular_rmse"), (DepthDPT, "rmse")])
def test_synth_dino_beats_random_init_on_synthscenes_small(probe3d_small, protocol, metric):
    """The shipped SynthScenes checkpoint against the random-init tiny ViT, preset synth on SynthScenes
    small (40-80 s each on one core); measured numbers: docs/protocols/probe3d.md."""
    from harness.models.sources import build_model

    root = probe3d_small
    scores = {}
    for name, model in [("random", ModelHandle.random_init("vit_cpu_tiny", seed=0)),
                        ("synth_dino", build_model("zoo:synth_dino"))]:
        (res,) = protocol.from_preset("synth", {"progress": False}).run(model, root)
        scores[name] = res.metrics[metric]
    assert scores["synth_dino"] < scores["random"], scores

