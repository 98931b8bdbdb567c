"""depth_linear: the declaration (metrics with their direction), depth SynthScenes in the NYU
layout, the protocol end to end on SynthScenes tiny with a tiny random ViT (per-image statistics
that recompute the metrics), and bad inputs each refused with one clear error."""
from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from benchmarks.depth.protocol import DepthLinear
from harness.data.nyu import NYUDepth
from benchmarks.depth.synthetic import generate, render
from harness.cli import main
from harness.errors import ConfigError, DataError, NotApplicable
from harness.models.handle import ModelHandle
from harness.per_image import decode_array
from harness.registry import declaration

QUICK = {"total_iters": 6, "warmup_iters": 2, "silog_warmup_iters": 2, "batch_size": 8, "progress": False}


pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def depth_tiny(tmp_path_factory) -> Path:
    return generate(tmp_path_factory.mktemp("depth") / "tiny", preset="tiny", seed=0, progress=False)


def test_declaration_states_each_metric_direction():
    decl = declaration("depth_linear")
    directions = {m.name: m.direction for m in decl.metrics}
    assert directions == {"RMSE": "lower", "AbsRel": "lower", "log_RMSE": "lower",
                          "delta1": "higher", "delta2": "higher", "delta3": "higher"}
    assert decl.headline_metric == "RMSE" and decl.metric("RMSE").unit == "m"
    assert decl.datasets == {"nyu": "harness.data.nyu", "kitti": "harness.data.kitti"}


def test_synthscenes_depth_round_trips_through_the_nyu_layout_in_metres(depth_tiny):
    assert generate(depth_tiny, preset="tiny", seed=0) == depth_tiny  # idempotent
    img, depth, f = render(np.random.default_rng([0, 0, 3]), 60, 80)
    assert img.shape == (60, 80, 3) and np.isfinite(depth).all()
    data = NYUDepth(depth_tiny, "train")
    assert len(data) == 32 and len(NYUDepth(depth_tiny, "test")) == 12
    stored = data.load_depth(3)
    np.testing.assert_allclose(stored, depth, atol=6e-4)  # millimetre PNG
    assert 0.5 < np.median(stored) < 10


def test_protocol_end_to_end_on_synthscenes_tiny(depth_tiny):
    model = ModelHandle.random_init("vit_cpu_tiny", seed=0)
    (res,) = DepthLinear.from_preset("synth", QUICK).run(model, depth_tiny)
    assert set(res.metrics) == {"RMSE", "AbsRel", "log_RMSE", "delta1", "delta2", "delta3"}
    assert all(np.isfinite(v) for v in res.metrics.values()) and 0 < res.metrics["RMSE"] < 10
    assert res.metrics["delta1"] <= res.metrics["delta2"] <= res.metrics["delta3"] <= 1
    block = res.per_image
    assert block["kind"] == "means" and block["images"] == 12
    values = decode_array(block["values"])
    for j, name in enumerate(block["metrics"]):
        assert values[:, j].mean() == pytest.approx(res.metrics[name], rel=1e-9)
    assert res.cost["eval_ms_per_image"] > 0


def test_examples_show_input_truth_prediction_and_error_with_the_runs_numbers(depth_tiny, tmp_path):
    """What the report shows beside the numbers: the head trained as run() trains it, each drawn
    image's prediction and its error, captioned with the image's RMSE as the record has it."""
    from harness.results.panels import draw_examples

    model = ModelHandle.random_init("vit_cpu_tiny", seed=0)
    proto = DepthLinear.from_preset("synth", QUICK)
    (res,) = proto.run(model, depth_tiny)
    examples = proto.examples(model, depth_tiny, count=2, seed=0)
    assert len(examples) == 2
    per_image = dict(zip(res.per_image["metrics"], decode_array(res.per_image["values"]).T))
    for ex in examples:
        assert [p.label for p in ex.panels] == ["input", "ground truth", "prediction", "|error|"]
        rgb, truth, pred, err = (p.image for p in ex.panels)
        assert rgb.dtype == np.uint8 and truth.shape == pred.shape == err.shape == rgb.shape[:2]
        i = int(ex.title.split()[-1])
        rmse = float(ex.panels[2].text.split()[1])
        assert rmse == pytest.approx(per_image["RMSE"][i], abs=6e-4)  # the caption rounds to 3 decimals
        assert np.isnan(err[truth == 0]).all() and np.nanmax(err) > 0
        assert ex.panels[1].value_range == ex.panels[2].value_range  # truth and prediction on one scale
    assert draw_examples(examples, tmp_path / "depth.png", "depth_linear").stat().st_size > 0


def test_a_model_without_a_patch_grid_is_refused_before_any_work(depth_tiny):
    class Pooled(torch.nn.Module):
        def forward(self, x):
            return x.mean((2, 3))

    model = ModelHandle.random_init("vit_cpu_tiny")
    model.backbone = Pooled()
    with pytest.raises(NotApplicable, match="patch grid"):
        DepthLinear.from_preset("synth", QUICK).run(model, depth_tiny / "nowhere")


def test_input_size_is_checked_against_the_stride(depth_tiny):
    model = ModelHandle.random_init("vit_cpu_tiny")
    with pytest.raises(ConfigError, match="multiple of the model's stride 8"):
        DepthLinear.from_preset("synth", {**QUICK, "random_crop": [44, 60], "pad_to_patch": "none"}).run(
            model, depth_tiny / "nowhere")
    with pytest.raises(ConfigError, match="larger than the training images"):
        DepthLinear.from_preset("synth", {**QUICK, "random_crop": [64, 80]}).run(model, depth_tiny)


def _copy(depth_tiny, tmp_path) -> Path:
    root = tmp_path / "nyu"
    shutil.copytree(depth_tiny, root)
    return root


def test_frames_without_an_eigen_mask_are_refused(depth_tiny, tmp_path):
    root = _copy(depth_tiny, tmp_path)
    for png in sorted(root.glob("test/*/sync_depth_*.png")):  # evaluation frames cropped already
        Image.open(png).crop((2, 2, 78, 58)).save(png)
    model = ModelHandle.random_init("vit_cpu_tiny")
    with pytest.raises(DataError, match="no Eigen mask for 56x76"):
        DepthLinear.from_preset("synth", QUICK).run(model, root)
    (res,) = DepthLinear.from_preset("synth", {**QUICK, "total_iters": 3, "eval_mask": "full"}).run(model, root)
    assert np.isfinite(res.metrics["RMSE"])


def test_depth_in_centimetres_is_refused(depth_tiny, tmp_path):
    root = _copy(depth_tiny, tmp_path)
    for png in sorted(root.glob("train/*/sync_depth_*.png")):  # centimetres where millimetres belong
        mm = np.asarray(Image.open(png)).astype(np.float64)
        Image.fromarray(np.round(mm / 10).astype(np.uint16)).save(png)
    with pytest.raises(DataError, match="centimetres where millimetres") as err:
        NYUDepth(root, "train")
    assert "sync_depth_00000.png" in str(err.value) and "\n" not in str(err.value)
    # a map in centimetres read as metres (depth_scale 10 makes millimetres read as cm-as-metres)
    with pytest.raises(DataError, match="centimetres where metres are expected"):
        NYUDepth(depth_tiny, "train", depth_scale=10.0)


def test_missing_split_file_names_the_layout(tmp_path):
    with pytest.raises(DataError, match="nyu_test.txt"):
        NYUDepth(tmp_path, "test")


def test_cli_bad_layout_one_error_line_exit_2_no_record(depth_tiny, isolated_home, capsys):
    root = _copy(depth_tiny, isolated_home)
    (root / "nyu_test.txt").unlink()
    rc = main(["--threads", "1", "eval", "--protocol", "depth_linear", "--preset", "synth", "--dataset", "nyu",
               "--data-root", str(root), "--random-init", "vit_cpu_tiny", "--set", "progress=false"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and err[0].startswith("error:") and "nyu_test.txt" in err[0]
    runs = isolated_home / "results" / "runs"
    assert not runs.exists() or not any(runs.iterdir())


@pytest.mark.slow
def test_synth_dino_beats_random_init_on_synthscenes_small(tmp_path_factory):
    """The shipped SynthScenes checkpoint against the random-init tiny ViT, preset synth on
    SynthScenes small (about 40 s each on one core); measured margins: benchmarks/depth/README.md."""
    from harness.models.sources import build_model

    root = generate(tmp_path_factory.mktemp("depth") / "small", preset="small", seed=0, progress=False)
    rmse = {}
    for name, model in [("random", ModelHandle.random_init("vit_cpu_tiny", seed=0)),
                        ("synth_dino", build_model("zoo:synth_dino"))]:
        (res,) = DepthLinear.from_preset("synth", {"progress": False}).run(model, root)
        rmse[name] = res.metrics["RMSE"]
    assert rmse["synth_dino"] < rmse["random"], rmse


def test_a_record_through_the_runner_keeps_per_image_means(depth_tiny, isolated_home):
    from harness.running.evaluate import evaluate

    model = ModelHandle.random_init("vit_cpu_tiny", seed=0)
    proto = DepthLinear.from_preset("synth", {**QUICK, "total_iters": 3})
    (rec,), skipped = evaluate(model, proto, depth_tiny, preset="synth")
    assert not skipped and rec["metrics"]["RMSE"] > 0
    assert rec["per_image"]["kind"] == "means" and rec["per_image"]["metrics"][0] == "RMSE"
    (again,), skipped = evaluate(model, proto, depth_tiny, preset="synth")
    assert skipped and again["metrics"] == rec["metrics"]
