"""Video object segmentation by label propagation (protocol ``davis``).

Parity (fixtures/davis_parity.json, written by reference/gen_davis_parity.py from
DINO's eval_video_segmentation.py and davis2017-evaluation, run unmodified):
- the masks the official script writes for a three-sequence clip (landscape, square -- its
  read_frame / read_seg transpose quirk --, portrait) with a stand-in feature extractor, against
  ours from the same features: every pixel equal (the operations are the official ones, in the
  same order, so the floats are the same);
- the DAVIS evaluation of those masks (per object J and F mean, recall, decay; the global row),
  against ours: 1e-9 (measured: 1e-14; both are float64 means of the same per-frame values);
- J and F per frame and db_statistics on masks built from integer geometry: 1e-12 (measured 0).
The clip's bytes are stored in the fixture, so JPEG encoders elsewhere cannot change the input.
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from benchmarks.davis import davis_metrics, frames
from benchmarks.davis.propagation import neighborhood_mask
from benchmarks.davis.protocol import VideoSegmentation
from harness.errors import ConfigError, DataError
from benchmarks.davis.reference import davis_common as dc
from harness.data.davis import DAVIS2017

FIXTURE = Path(__file__).parents[1] / "fixtures" / "davis_parity.json"
# the manifest: the fixture this test was written against (regenerate with its generator and update)
FIXTURE_SHA256 = "b66574c2860d64759c98db1c32021915b2a5f77bd8630fef2c0b280e601d6263"
# global metrics are means of float64 per-frame values over the same objects in the same order:
# measured difference 1e-14 (in percent); 1e-9 leaves room for another summation order
METRIC_TOL = 1e-9


@pytest.fixture(scope="module")
def fixture():
    assert FIXTURE.is_file(), (f"{FIXTURE} missing: restore it from git or run "
                               "benchmarks/davis/reference/gen_davis_parity.py")
    digest = hashlib.sha256(FIXTURE.read_bytes()).hexdigest()
    assert digest == FIXTURE_SHA256, f"{FIXTURE.name} is not the file this test was written against ({digest})"
    return json.loads(FIXTURE.read_text())


@pytest.fixture(scope="module")
def clip(fixture, tmp_path_factory):
    return dc.write_files(tmp_path_factory.mktemp("davis_parity") / "DAVIS", fixture["clip"])


def _standin():
    return SimpleNamespace(backbone=dc.HarnessStandIn(), name="standin", cache_key="standin")


@pytest.fixture(scope="module")
def ours(clip, tmp_path_factory):
    """One run of the protocol on the parity clip, its masks written as palette PNGs."""
    art = tmp_path_factory.mktemp("davis_masks")
    proto = VideoSegmentation.from_preset("dino", {"progress": False, "save_masks": True, "artifacts_dir": str(art)})
    [r] = proto.run(_standin(), clip)
    return r, Path(r.artifacts["masks"])


def test_propagated_masks_equal_the_official(fixture, ours):
    from PIL import Image

    _, masks = ours
    for name, packed in fixture["masks"].items():
        official = dc.unpack(packed)
        files = sorted((masks / name).glob("*.png"))
        assert len(files) == official.shape[0]
        mine = np.stack([np.array(Image.open(f)) for f in files])
        differ = int((mine != official).sum())
        assert differ == 0, f"{name}: {differ} of {mine.size} pixels differ from the official masks"


def test_j_and_f_equal_the_davis_evaluation(fixture, ours):
    r, _ = ours
    g = fixture["evaluation"]["global"]
    names = {"JF_mean": "J&F-Mean", "J_mean": "J-Mean", "J_recall": "J-Recall", "J_decay": "J-Decay",
             "F_mean": "F-Mean", "F_recall": "F-Recall", "F_decay": "F-Decay"}
    for mine, theirs in names.items():
        assert abs(r.metrics[mine] - 100 * g[theirs]) <= METRIC_TOL, (mine, r.metrics[mine], g[theirs])
    objects = fixture["evaluation"]["objects"]
    assert list(r.params["objects"]) == list(objects)
    for name, o in objects.items():
        assert abs(r.params["objects"][name]["J_mean"] - o["J"][0]) <= 1e-6
        assert abs(r.params["objects"][name]["F_mean"] - o["F"][0]) <= 1e-6
    # the per-sequence block gives the metrics back (the bootstrap resamples its rows)
    from harness.per_image import decode_array

    block = r.per_image
    num, den = decode_array(block["numerators"]), decode_array(block["denominators"])
    assert block["images"] == 3
    for i, m in enumerate(block["metrics"]):
        if m != "JF_mean":
            assert abs(100 * num[:, i].sum() / den[:, i].sum() - r.metrics[m]) <= METRIC_TOL


@pytest.mark.parametrize("index", range(len(dc.METRIC_CASES)))
def test_per_frame_j_f_and_statistics_equal_the_official(fixture, index):
    case = fixture["metric_cases"][index]
    gt, seg = dc.metric_case(dc.METRIC_CASES[index])
    assert dc.sha256(gt, seg) == case["masks_sha256"], "the metric case's masks changed"
    j, f = davis_metrics.db_iou(gt, seg), davis_metrics.db_boundary(gt, seg)
    np.testing.assert_allclose(j, case["J"], rtol=0, atol=1e-12)
    np.testing.assert_allclose(f, case["F"], rtol=0, atol=1e-12)
    np.testing.assert_allclose(davis_metrics.statistics(j), case["J_stats"], rtol=0, atol=1e-12)
    np.testing.assert_allclose(davis_metrics.statistics(f), case["F_stats"], rtol=0, atol=1e-12)


def test_frame_resize_is_opencvs_bilinear():
    cv2 = pytest.importorskip("cv2")
    rng = np.random.default_rng(0)
    for h, w, th, tw in [(480, 854, 480, 832), (854, 480, 832, 480), (64, 64, 480, 448), (37, 91, 60, 41),
                         (100, 150, 64, 128), (5, 3, 9, 7)]:
        img = rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
        assert np.array_equal(frames.resize_linear(img, (th, tw)), cv2.resize(img, (tw, th))), (h, w, th, tw)


def test_official_sizes_and_the_square_quirk():
    assert frames.frame_size(480, 854) == (480, 832) == frames.label_size(480, 854)
    assert frames.frame_size(854, 480) == (832, 480) == frames.label_size(854, 480)
    # a square frame: read_frame takes the else branch (th = 480), read_seg too (tw = 480)
    assert frames.frame_size(64, 64) == (480, 448) and frames.label_size(64, 64) == (448, 480)


def test_neighborhood_is_the_official_window():
    h, w, size = 4, 5, 1
    want = torch.zeros(h, w, h, w)
    for i in range(h):
        for j in range(w):
            for p in range(2 * size + 1):
                for q in range(2 * size + 1):
                    a, b = i - size + p, j - size + q
                    if 0 <= a < h and 0 <= b < w:
                        want[i, j, a, b] = 1
    assert torch.equal(neighborhood_mask(h, w, size), want.reshape(h * w, h * w))


# ----------------------------------------------------------------------------- SynthScenes
@pytest.fixture(scope="module")
def synth_clips(tmp_path_factory):
    from benchmarks.davis.synthetic import generate

    return generate(tmp_path_factory.mktemp("davis_synth") / "tiny", preset="tiny", seed=0, progress=False)


def test_synth_tiny_end_to_end(synth_clips, isolated_home):
    from harness.models.handle import ModelHandle

    model = ModelHandle.random_init("vit_cpu_tiny", seed=0)
    [r] = VideoSegmentation.from_preset("synth", {"progress": False}).run(model, synth_clips)
    assert set(r.metrics) == {"JF_mean", "J_mean", "J_recall", "J_decay", "F_mean", "F_recall", "F_decay"}
    assert 0 < r.metrics["J_mean"] <= 100 and 0 < r.metrics["F_mean"] <= 100
    assert r.params["n_sequences"] == 3 and r.params["frame_sizes"] == ["128x64"]
    assert r.per_image["kind"] == "ratios" and r.per_image["images"] == 3
    assert set(r.cost) == {"extract_s", "propagate_s", "metrics_s"}


def test_synth_generator_is_idempotent_and_seeded(synth_clips, tmp_path):
    from benchmarks.davis.synthetic import generate

    assert generate(synth_clips, preset="tiny", seed=0) == synth_clips
    other = generate(tmp_path / "again", preset="tiny", seed=0)
    for p in sorted(synth_clips.rglob("*.png"))[:4]:
        assert p.read_bytes() == (other / p.relative_to(synth_clips)).read_bytes()
    with pytest.raises(DataError, match="another data set"):
        generate(synth_clips, preset="tiny", seed=1)


# ----------------------------------------------------------------------------- bad inputs
def _copy(src: Path, dst: Path) -> Path:
    import shutil

    shutil.copytree(src, dst)
    return dst


def test_no_first_annotation(synth_clips, tmp_path):
    root = _copy(synth_clips, tmp_path / "d")
    (root / "Annotations" / "480p" / "clip01" / "00000.png").unlink()
    with pytest.raises(DataError, match="no annotation for its first frame 00000.jpg"):
        DAVIS2017(root, "val")


def test_listed_sequence_without_frames(synth_clips, tmp_path):
    root = _copy(synth_clips, tmp_path / "d")
    with open(root / "ImageSets" / "2017" / "val.txt", "a") as f:
        f.write("ghost\n")
    with pytest.raises(DataError, match="'ghost' listed in .*val.txt has no frames"):
        DAVIS2017(root, "val")


def test_model_without_patch_grid(synth_clips):
    model = SimpleNamespace(backbone=torch.nn.Linear(2, 2), name="cls-only")
    with pytest.raises(ConfigError, match="has no patch grid"):
        VideoSegmentation.from_preset("synth", {"progress": False}).run(model, synth_clips)


def test_input_size_not_a_multiple_of_the_patch(synth_clips):
    proto = VideoSegmentation.from_preset("synth", {"progress": False, "scale_size": 60})
    with pytest.raises(ConfigError, match=r"davis: .* not a multiple of the stride 8 of model .*; set scale_size=56 "
                                          r"or 64 and size_multiple=8 .*--set davis.scale_size=N"):
        proto.run(_patch8(), synth_clips)


def _patch8():
    from harness.models.handle import ModelHandle

    return ModelHandle.random_init("vit_cpu_tiny", seed=0)


def test_cli_bad_layout_one_error_line_no_record(synth_clips, tmp_path, isolated_home, capsys):
    from harness.cli import main

    root = _copy(synth_clips, tmp_path / "d")
    (root / "Annotations" / "480p" / "clip00" / "00000.png").unlink()
    rc = main(["--threads", "1", "eval", "--protocol", "davis", "--preset", "synth", "--dataset", "davis2017",
               "--data-root", str(root), "--random-init", "vit_cpu_tiny", "--set", "progress=false"])
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert rc == 2 and len(lines) == 1 and lines[0].startswith("error: ") and "first frame" in lines[0], err
    runs = isolated_home / "results" / "runs"
    assert not runs.exists() or not any(runs.iterdir())


@pytest.mark.slow
def test_synth_small_ranks_ssl_checkpoints_above_random_init(tmp_path, isolated_home):
    """The shipped SynthScenes DINO and iBOT checkpoints track the clips' objects better than
    a random ViT (measured (J&F)m on small, seed 0: 29.0 / 28.7 vs 23.4)."""
    from benchmarks.davis.synthetic import generate
    from harness.models.sources import build_model

    root = generate(tmp_path / "small", preset="small", seed=0, progress=False)
    score = {spec: VideoSegmentation.from_preset("synth", {"progress": False}).run(build_model(spec), root)[0]
             .metrics["JF_mean"] for spec in ("random_init:vit_cpu_tiny", "zoo:synth_dino", "zoo:synth_ibot")}
    assert min(score["zoo:synth_dino"], score["zoo:synth_ibot"]) > score["random_init:vit_cpu_tiny"] + 2, score


def test_davis_declares_its_minimum_grid():
    from benchmarks.davis.protocol import MIN_GRID_CELLS, MIN_GRID_WHY
    from harness.features.grid import coarse_grid_flag

    flag = coarse_grid_flag("davis", (2, 4), MIN_GRID_CELLS, MIN_GRID_WHY, "r18", 32, (64, 128))
    assert flag.startswith("davis: the feature grid of model r18 is 4x2 cells (stride 32 on 128x64 inputs), "
                           "below the protocol's minimum of 8 cells a side (the official 480 p frames")
    assert coarse_grid_flag("davis", (8, 16), MIN_GRID_CELLS, MIN_GRID_WHY, "vit", 8, (64, 128)) is None
