"""What Probe3D's two dense probes (normals_dpt, depth_dpt) share, from the core: the training loop
and validation step for step against the official loop, the schedule and the padding
(tests/fixtures/probe3d_dpt.json, from tests/reference/gen_probe3d_dpt.py), Probe3D's block
choice, SynthScenes in Probe3D's NYU and NAVI layouts and their readers (the NAVI frames against
Probe3D's loader: tests/fixtures/probe3d_navi.json), bad layouts refused naming the file, and the
examples and the SynthScenes check of both probes. Each probe's own head, loss and metric parity:
benchmarks/normals/tests/, benchmarks/depth/tests/."""
from __future__ import annotations

import json
import pickle
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from benchmarks.depth.protocol_dpt import DepthDPT
from benchmarks.normals.protocol import NormalsDPT
from dpt_parity import load_official, official_head, probe3d_tiny
from harness.data.navi_probe3d import NAVIFrames
from harness.data.nyu_probe3d import NYUNormals
from harness.data.synthetic_probe3d import generate, render
from harness.errors import ConfigError, DataError, NotApplicable
from harness.models.handle import ModelHandle
from harness.probes.depth_bins import bins_to_depth
from harness.probes.dpt_features import blocks_for, center_padding, chosen_blocks, probe3d_blocks
from harness.probes.dpt_training import Frames, schedule_factor

FIXTURES = Path(__file__).parent / "fixtures"
QUICK = {"epochs": 2, "warmup_epochs": 0.5, "hidden_dim": 8, "progress": False}


pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def official():
    return load_official()


@pytest.fixture(scope="module")
def synth_tiny(tmp_path_factory) -> Path:
    return probe3d_tiny(tmp_path_factory)


@pytest.mark.parametrize("task", ["normals", "depth"])
def test_training_steps_and_validation_match_the_official_loop(official, task):
    """Two epochs of three batches through train_snorm.py / train_depth.py train() (LambdaLR, AdamW),
    then validate(), from the same initial weights and stored features: each step's lr and loss, the
    trained probe's output and the per-image metrics. Adam's normalised steps carry float32 rounding
    differences of the kernels forward, so 1e-4 relative on the trained output."""
    data, arrays = official
    ref = data["training"][task]
    proto = (NormalsDPT if task == "normals" else DepthDPT).from_preset("probe3d", {"progress": False})
    head = official_head(arrays, f"{task}_head", 4 if task == "normals" else 256)
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
        if task == "depth":  # Probe3D's 256 linear bins, in the scores' dtype
            out = bins_to_depth(out, 0.001, 10.0, "linear", "linear", centres_dtype=out.dtype)
        _check_sampled_loose(out, ref["trained_output"])
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
    small (40-80 s each on one core); measured numbers: benchmarks/normals/README.md and benchmarks/depth/README.md."""
    from harness.models.sources import build_model

    root = probe3d_small
    scores = {}
    for name, model in [("random", ModelHandle.random_init("vit_cpu_tiny", seed=0)),
                        ("synth_dino", build_model("zoo:synth_dino"))]:
        (res,) = protocol.from_preset("synth", {"progress": False}).run(model, root)
        scores[name] = res.metrics[metric]
    assert scores["synth_dino"] < scores["random"], scores
