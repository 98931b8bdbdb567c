"""depth_linear's presets beyond DINOv3's NYU recipe: DINOv2's linear4 head (its feature assembly
and bins against dinov2's own BNHead, benchmarks/depth/fixtures/depth_linear4.json, written by
benchmarks/depth/reference/gen_depth_linear4.py), KITTI's Eigen split (reader, KB and Garg crops, bad layouts)
and runs of both on tiny SynthScenes with a random tiny ViT; the dinov3 preset's fingerprint and
request hash as they were before these settings existed."""
from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from benchmarks.depth.blocks import block_indices
from benchmarks.depth.head import LinearDepthHead, logits_to_depth
from benchmarks.depth.metrics import kitti_box, valid_mask
from benchmarks.depth.protocol import PRESETS, DepthLinear
from harness.data.kitti import KITTIDepth
from benchmarks.depth.synthetic import generate as generate_nyu
from benchmarks.depth.synthetic_kitti import generate as generate_kitti
from benchmarks.depth.transforms import kb_crop_box
from harness.cli import main
from harness.errors import ConfigError, DataError
from harness.models.handle import ModelHandle

FIX = Path(__file__).parent.parent / "fixtures"
QUICK = {"total_iters": 6, "warmup_iters": 2, "silog_warmup_iters": 2, "batch_size": 8, "progress": False}


pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def linear4():
    data = json.loads((FIX / "depth_linear4.json").read_text())
    arrays_path = FIX / data["arrays"]
    assert hashlib.sha256(arrays_path.read_bytes()).hexdigest() == data["arrays_sha256"], "arrays changed"
    assert data["provenance"]["commit"] == "b8931f7bf91576930313be2c6d6af376033b35f0"
    return data, np.load(arrays_path)


@pytest.fixture(scope="module")
def kitti_tiny(tmp_path_factory) -> Path:
    return generate_kitti(tmp_path_factory.mktemp("kitti") / "tiny", preset="tiny", seed=0, progress=False)


@pytest.fixture(scope="module")
def nyu_tiny(tmp_path_factory) -> Path:
    return generate_nyu(tmp_path_factory.mktemp("nyu") / "tiny", preset="tiny", seed=0, progress=False)


# ---------------------------------------------------------------- presets
def test_every_preset_loads_and_dinov3_keeps_its_fingerprint_and_request_hash():
    assert {"dinov3", "dinov2_linear4", "dinov2_linear4_kitti", "synth", "synth_linear4", "synth_kitti"} <= set(PRESETS)
    for name in PRESETS:
        DepthLinear.from_preset(name)
    # the values before blocks / upsample / conv_init / bins_max_depth / KB crop existed (HEAD aa209e2)
    dinov3, synth = DepthLinear.from_preset("dinov3"), DepthLinear.from_preset("synth")
    assert (dinov3.fingerprint(), dinov3.request_hash()) == ("173e4e3848fd6f8e", "c55c4c6bf20de9b6")
    assert (synth.fingerprint(), synth.request_hash()) == ("78daedfe8cd189b8", "bcc917d718be316a")
    # a setting away from its absent value is in both
    moved = DepthLinear.from_preset("dinov3", {"upsample": 4})
    assert moved.fingerprint() != dinov3.fingerprint() and moved.request_hash() != dinov3.request_hash()


def test_dinov2_linear4_preset_states_what_dinov2s_head_does(linear4):
    facts = linear4[0]["head"]
    cfg = DepthLinear.from_preset("dinov2_linear4").cfg
    assert (cfg.layers, cfg.blocks, cfg.final_norm, cfg.cls_token) == (4, "dinov2", False, True)
    assert cfg.batchnorm is facts["has_batchnorm"] is False
    assert cfg.upsample == facts["upsample"] and cfg.n_bins == facts["n_bins"]
    assert cfg.bins_max_depth == facts["max_depth"] == 80 and cfg.min_depth == facts["min_depth"]
    assert (cfg.bins, facts["bins_strategy"], cfg.bin_norm, facts["norm_strategy"]) == ("linear", "UD", "linear",
                                                                                          "linear")
    assert cfg.conv_init == "default"
    kitti = DepthLinear.from_preset("dinov2_linear4_kitti").cfg
    assert (kitti.dataset, kitti.max_depth, kitti.depth_scale, kitti.eval_mask) == ("kitti", 80.0, 256.0, "kitti_garg")
    assert (kitti.fixed_crop, kitti.eval_crop, kitti.kb_crop, kitti.random_crop) == ("kb", "kb", [352, 1216],
                                                                                     [352, 704])


def test_block_indices_match_dinov2s_out_index(linear4):
    for arch, row in linear4[0]["blocks"].items():
        assert block_indices("dinov2", 4, row["n_blocks"]) == row["out_index"], arch
        assert row["norm"] is False and row["return_class_token"] is True
    assert block_indices("dinov2", 4, 40) == [9, 19, 29, 39]  # vit_giant2 (read from hub/depthers.py)
    assert block_indices("dinov2", 2, 3) == [0, 2] and block_indices("dinov2", 1, 12) == [11]
    assert block_indices("last", 4, 12) == [8, 9, 10, 11]
    with pytest.raises(ConfigError, match="layers 4 but the model has 3 blocks"):
        block_indices("dinov2", 4, 3)


# ---------------------------------------------------------------- the linear4 head against dinov2's BNHead
def test_linear4_feature_assembly_and_depth_match_dinov2(linear4):
    data, arrays = linear4
    feats, cls = torch.from_numpy(arrays["feats"]), torch.from_numpy(arrays["cls"])
    d = feats.shape[2]
    head = LinearDepthHead([d] * 4, 256, batchnorm=False, cls_token=True, upsample=4, conv_init="default")
    head.conv.weight.data.copy_(torch.from_numpy(arrays["conv_weight"]))
    head.conv.bias.data.copy_(torch.from_numpy(arrays["conv_bias"]))
    seen = []
    head.conv.register_forward_hook(lambda mod, inp, out: seen.append(inp[0].detach()))
    head.eval()
    with torch.no_grad():
        logits = head([feats[i] for i in range(4)], [cls[i] for i in range(4)])
    assert list(seen[0].shape) == data["head"]["assembled_shape"]
    # float32 bilinear resizes and a 32-channel sum: last-bit differences only (measured 0 here)
    np.testing.assert_allclose(seen[0].numpy(), arrays["assembled"], rtol=0, atol=1e-6)
    depth = logits_to_depth(logits, 0.001, 80.0, "linear", "linear")
    np.testing.assert_allclose(depth.numpy(), arrays["depth"], rtol=0, atol=1e-4)  # metres up to 80


def test_features_read_dinov2s_blocks_without_the_final_norm():
    model = ModelHandle.random_init("vit_cpu_tiny", seed=0)
    proto = DepthLinear.from_preset("synth_linear4")
    x = torch.randn(2, 3, 48, 64)
    with torch.no_grad():
        patches, cls = proto.features(model.backbone, x, 8)
        every = model.backbone.get_features(x, n_last_blocks=3, final_norm=False)
    assert len(patches) == 2
    for got, block in zip(patches, [0, 2]):
        torch.testing.assert_close(got, every.patches[:, block].permute(0, 3, 1, 2))
    torch.testing.assert_close(cls[1], every.cls[:, 2])


# ---------------------------------------------------------------- KITTI
def test_kb_and_garg_crops_on_kittis_frames():
    assert kb_crop_box(375, 1242) == (23, 375, 13, 1229)
    assert kb_crop_box(370, 1224) == (18, 370, 4, 1220)
    assert kitti_box(352, 1216) == (143, 349, 43, 1172)
    gt = torch.ones(1, 1, 352, 1216)
    assert int(valid_mask(gt, "kitti_garg").sum()) == (349 - 143) * (1172 - 43)


def test_kitti_reader_reads_the_toolbox_layout_in_metres(kitti_tiny):
    assert generate_kitti(kitti_tiny, preset="tiny", seed=0) == kitti_tiny  # idempotent
    train, test = KITTIDepth(kitti_tiny, "train"), KITTIDepth(kitti_tiny, "test")
    assert len(train) == 24 and len(test) == 8  # the test file's 'None' line skipped
    depth = test.load_depth(0)
    assert depth.shape == (47, 155) and depth.dtype == np.float32
    assert 5 < depth.max() < 80 and (depth[:15] == 0).all() and 0.1 < (depth > 0).mean() < 0.4
    assert test.image_paths[0].relative_to(kitti_tiny).parts[:2] == ("input", "2011_09_26")
    assert "gt_depth" in test.depth_paths[0].parts and "proj_depth" in test.depth_paths[0].parts


def _copy(src: Path, tmp_path: Path) -> Path:
    root = tmp_path / "kitti"
    shutil.copytree(src, root)
    return root


def test_wrong_kitti_layouts_are_refused_in_one_line(kitti_tiny, tmp_path):
    with pytest.raises(DataError, match="kitti_eigen_test.txt not found") as err:
        KITTIDepth(tmp_path, "test")
    assert "\n" not in str(err.value) and "gt_depth/" in str(err.value)
    root = _copy(kitti_tiny, tmp_path)
    shutil.rmtree(root / "input")  # images elsewhere (the raw-data folders at the root)
    with pytest.raises(DataError, match="does not exist: expected the Monocular-Depth-Estimation-Toolbox layout"):
        KITTIDepth(root, "train")
    (root / "kitti_eigen_test.txt").write_text("2011_09_26/a.png 2011_09_26_drive_0002_sync/b.png\n")
    with pytest.raises(DataError, match="is not '<rgb> <depth> <focal>'"):
        KITTIDepth(root, "test")
    with pytest.raises(DataError, match="metres x 256"):  # depth read 10 times too deep
        KITTIDepth(kitti_tiny, "train", depth_scale=25.6)
    with pytest.raises(DataError, match="another unit than metres x 256"):  # 10 times too shallow
        KITTIDepth(kitti_tiny, "train", depth_scale=2560)


def test_kitti_run_on_synthscenes_kb_crops_and_garg_masks(kitti_tiny):
    model = ModelHandle.random_init("vit_cpu_tiny", seed=0)
    proto = DepthLinear.from_preset("synth_kitti", QUICK)
    (res,) = proto.run(model, kitti_tiny)
    assert res.dataset == "kitti" and res.per_image["images"] == 8
    assert all(np.isfinite(v) for v in res.metrics.values()) and 0 < res.metrics["RMSE"] < 80
    assert res.metrics["delta1"] <= res.metrics["delta2"] <= res.metrics["delta3"] <= 1
    with pytest.raises(DataError, match="smaller than the KB crop 48x152"):
        DepthLinear.from_preset("synth_kitti", {**QUICK, "kb_crop": [48, 152]}).run(model, kitti_tiny)


def test_linear4_run_on_synthscenes_nyu(nyu_tiny):
    model = ModelHandle.random_init("vit_cpu_tiny", seed=0)
    (res,) = DepthLinear.from_preset("synth_linear4", QUICK).run(model, nyu_tiny)
    assert res.params["preset"] == "synth_linear4" and res.per_image["images"] == 12
    assert all(np.isfinite(v) for v in res.metrics.values()) and 0 < res.metrics["RMSE"] < 10
    with pytest.raises(ConfigError, match="layers 4 but the model has 3 blocks"):
        DepthLinear.from_preset("synth_linear4", {**QUICK, "layers": 4}).run(model, nyu_tiny)


def test_cli_kitti_without_split_files_one_error_line_exit_2_no_record(kitti_tiny, isolated_home, capsys):
    root = _copy(kitti_tiny, isolated_home)
    (root / "kitti_eigen_train.txt").unlink()
    rc = main(["--threads", "1", "eval", "--protocol", "depth_linear", "--preset", "synth_kitti", "--dataset",
               "kitti", "--data-root", str(root), "--random-init", "vit_cpu_tiny", "--set", "progress=false"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and err[0].startswith("error:") and "kitti_eigen_train.txt" in err[0]
    runs = isolated_home / "results" / "runs"
    assert not runs.exists() or not any(runs.iterdir())


@pytest.mark.slow
@pytest.mark.parametrize("preset", ["synth_linear4", "synth_kitti"])
def test_synth_dino_beats_random_init_with_the_presets(preset, tmp_path_factory):
    """The shipped SynthScenes checkpoint against the random-init tiny ViT on SynthScenes small
    (30-50 s per model on one core); measured margins: benchmarks/depth/README.md."""
    from harness.models.sources import build_model

    make = generate_kitti if preset == "synth_kitti" else generate_nyu
    root = make(tmp_path_factory.mktemp(preset) / "small", preset="small", seed=0, progress=False)
    rmse = {}
    for name, model in [("random", ModelHandle.random_init("vit_cpu_tiny", seed=0)),
                        ("synth_dino", build_model("zoo:synth_dino"))]:
        (res,) = DepthLinear.from_preset(preset, {"progress": False}).run(model, root)
        rmse[name] = res.metrics["RMSE"]
    assert rmse["synth_dino"] < rmse["random"], rmse
