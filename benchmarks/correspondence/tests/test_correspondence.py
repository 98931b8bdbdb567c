"""correspondence: the declaration, correspondence SynthScenes in SPair-71k's layout, the
protocol end to end on SynthScenes tiny with a tiny random ViT (per-pair statistics that
recompute the metrics), bad inputs refused with one clear error, and parity with Probe3D's own
code (benchmarks/correspondence/fixtures/correspondence_probe3d.json,
benchmarks/correspondence/reference/gen_correspondence_probe3d.py):
its matching and scoring on stored feature maps, its SPair reader on a synthetic set, and its
evaluation end to end with a stand-in model."""
from __future__ import annotations

import hashlib
import json
import random
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from benchmarks.correspondence.matching import (SquareResize, pair_errors, scaled_keypoints, select_pairs,
                                                threshold_scale)
from benchmarks.correspondence.protocol import Correspondence
from harness.data.spair71k import SPair71k
from benchmarks.correspondence.synthetic import CATEGORIES, PRESETS, Preset, generate, write_pairs
from harness.cli import main
from harness.errors import ConfigError, DataError, NotApplicable
from harness.models.archs import BackboneFeatures
from harness.models.handle import ModelHandle
from harness.per_image import decode_array, read_per_image

FIXTURE = Path(__file__).parent.parent / "fixtures" / "correspondence_probe3d.json"

# ----------------------------------------------------------------------------- shared with the generator
# The parity set: correspondence SynthScenes written under three of SPair's category names (Probe3D's
# reader keys its masks by them), 9 pairs each, 2 drawn per (category, bin); inputs 120x120 for a
# patch-16 stand-in (padded to 128 by Probe3D's center_padding: the padding quirk is exercised).
PARITY_CATEGORIES = ("aeroplane", "bicycle", "bird")
PARITY_PRESET = Preset(pairs_per_category=9)
PARITY_SEED = 7
PARITY_IMAGE_SIZE = 120
PARITY_PATCH = 16
PARITY_INSTANCES = 2


def write_parity_set(root: Path) -> list[str]:
    return write_pairs(root, PARITY_PRESET, PARITY_SEED, categories=PARITY_CATEGORIES, shapes=CATEGORIES)


def standin_patch_features(x: torch.Tensor, patch: int = PARITY_PATCH) -> torch.Tensor:
    """(B, 9, h, w) from (B, 3, H, W) images: each patch's mean colour, mean squared colour and
    maximum colour; fixed, weight-free, the same function on both sides of the parity test."""
    return torch.cat([F.avg_pool2d(x, patch), F.avg_pool2d(x * x, patch), F.max_pool2d(x, patch)], dim=1)


class StandInBackbone(torch.nn.Module):
    """The stand-in with this project's feature contract (images come padded by the transform)."""

    patch_size = PARITY_PATCH
    embed_dim = 9
    pos_interp_id = "official"
    num_blocks = 1

    def __init__(self):
        super().__init__()
        self.anchor = torch.nn.Parameter(torch.zeros(1), requires_grad=False)  # a device to report

    def get_features(self, x, n_last_blocks: int = 1, final_norm: bool = True) -> BackboneFeatures:
        f = standin_patch_features(x).permute(0, 2, 3, 1)[:, None]
        return BackboneFeatures(cls=f.mean((2, 3)), patches=f)


def standin_model() -> ModelHandle:
    return ModelHandle(name="probe3d-standin", backbone=StandInBackbone(), meta={"identity": "probe3d-standin-v1"})


def matching_cases(seed: int = 11) -> list[dict]:
    """Seeded feature maps (values on a 1/64 grid: exact in float32), keypoints and scales. The
    target map is the source map plus noise and its keypoints the source's moved a little, so that
    some matches fall within the threshold and some do not."""
    rng = np.random.default_rng(seed)
    cases = []
    for grid, size, dim in [(16, 64, 5), (12, 96, 6), (20, 120, 6), (8, 120, 3), (10, 80, 4), (24, 128, 8)]:
        k = 12
        src = rng.normal(size=(dim, grid, grid))
        trg = src + 0.4 * rng.normal(size=src.shape)
        kps_src = rng.integers(0, size, (k, 2))
        kps_trg = np.clip(kps_src + rng.integers(-4, 5, (k, 2)), 0, size - 1)
        vis = [(rng.uniform(size=(k, 1)) < 0.8).astype(int) for _ in (0, 1)]
        cases.append({"grid": grid, "image_size": size,
                      "feats": [(np.round(f * 64) / 64).tolist() for f in (src, trg)],
                      "kps": [np.concatenate([k, v], 1).tolist() for k, v in zip((kps_src, kps_trg), vis)],
                      "scale": float(rng.uniform(0.4, 1.0))})
    return cases


def pixel_digest(img) -> str:
    return hashlib.sha256(np.ascontiguousarray(np.asarray(img.convert("RGB"))).tobytes()).hexdigest()


# ----------------------------------------------------------------------------- fixtures
pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def spair_tiny(tmp_path_factory) -> Path:
    return generate(tmp_path_factory.mktemp("corr") / "tiny", preset="tiny", seed=0, progress=False)


QUICK = {"progress": False}


# ----------------------------------------------------------------------------- declaration and data
def test_declaration_states_each_metric_direction():
    from harness.registry import declaration

    decl = declaration("correspondence")
    assert {m.name: m.direction for m in decl.metrics} == {"PCK": "higher", "PCK_vp0": "higher",
                                                          "PCK_vp1": "higher", "PCK_vp2": "higher"}
    assert decl.headline_metric == "PCK" and decl.metric("PCK").unit == "%"
    assert decl.datasets == {"spair71k": "harness.data.spair71k"}


def test_synthscenes_pairs_round_trip_through_the_spair_layout(spair_tiny):
    assert generate(spair_tiny, preset="tiny", seed=0) == spair_tiny  # idempotent
    data = SPair71k(spair_tiny, "test")
    n = PRESETS["tiny"].pairs_per_category
    assert len(data) == 3 * n and data.categories == sorted(CATEGORIES)
    assert sorted({p.viewpoint for p in data.pairs}) == [0, 1, 2]
    p = data.pairs[0]
    src, trg = data.keypoints(p.category, p.source), data.keypoints(p.category, p.target)
    assert src.shape == trg.shape == (8, 3) and set(np.unique(src[:, 2])) <= {0, 1}
    ann = json.loads((spair_tiny / "PairAnnotation" / "test" / f"{p.name}.json").read_text())
    both = [i for i in range(8) if src[i, 2] and trg[i, 2]]
    assert ann["kps_ids"] == both and [list(src[i, :2]) for i in both] == ann["src_kps"]
    x1, y1, x2, y2 = p.target_box
    assert 0 <= x1 < x2 <= p.target_size[0] and 0 <= y1 < y2 <= p.target_size[1]


def test_pairs_are_drawn_as_probe3d_draws_them():
    """select_pairs = filter, then the module-level random.seed(20); random.shuffle; [:n]."""
    from harness.data.spair71k import Pair

    pairs = [Pair(f"{i:06d}", "cat" if i % 3 else "dog", "a", "b", i % 3, (0, 0, 1, 1), (2, 2)) for i in range(60)]
    expected = [p for p in pairs if p.category == "cat" and p.viewpoint == 1]
    random.seed(20)
    random.shuffle(expected)
    assert select_pairs(pairs, "cat", 1, 5, 20) == expected[:5]
    assert select_pairs(pairs, "dog", None, None, 20) == [p for p in pairs if p.category == "dog"]


def test_keypoints_scale_like_probe3d_int_tensors():
    kps = np.array([[99, 10, 1], [0, 49, 1], [3, 3, 0]])
    out = scaled_keypoints(kps, (50, 100), 800)  # padded side 100: x 8x, truncated
    assert out.tolist() == [[792, 80, 1], [0, 392, 1], [24, 24, 0]]
    assert threshold_scale((10, 20, 60, 40), (100, 80)) == pytest.approx(0.5)


# ----------------------------------------------------------------------------- end to end
def test_protocol_end_to_end_on_synthscenes_tiny(spair_tiny, isolated_home):
    model = ModelHandle.random_init("vit_cpu_tiny", seed=0)
    (res,) = Correspondence.from_preset("synth", QUICK).run(model, spair_tiny)
    assert set(res.metrics) == {"PCK", "PCK_vp0", "PCK_vp1", "PCK_vp2"}
    assert all(0 <= v <= 100 for v in res.metrics.values())
    per_cat = res.params["per_category"]
    assert set(per_cat) == set(CATEGORIES)
    assert res.metrics["PCK"] == pytest.approx(np.mean([per_cat[c]["all"] for c in CATEGORIES]))
    assert res.params["n_pairs"] == {"vp0": 6, "vp1": 6, "vp2": 6, "all": 18}
    stats = read_per_image(json.loads(json.dumps(res.per_image)))
    assert stats.images == 36  # each pair once in its viewpoint bin and once in "all"
    for name, value in res.metrics.items():  # the whole set recomputes every metric exactly
        assert stats.metric_of_weights(np.ones((1, stats.images)), name)[0] == pytest.approx(value, abs=1e-9)


def test_a_record_through_the_runner_keeps_per_pair_statistics(spair_tiny, isolated_home):
    from harness.running.evaluate import evaluate

    model = ModelHandle.random_init("vit_cpu_tiny", seed=0)
    proto = Correspondence.from_preset("synth", QUICK)
    (rec,), skipped = evaluate(model, proto, spair_tiny, preset="synth")
    assert not skipped and rec["per_image"]["kind"] == "category_pck"
    (again,), skipped = evaluate(model, proto, spair_tiny, preset="synth")
    assert skipped and again["metrics"] == rec["metrics"]


def test_examples_draw_each_match_green_within_alpha(spair_tiny, isolated_home, tmp_path):
    """What `ssl-bench show` draws: both images as the model saw them, one line per keypoint
    visible in both, from the source keypoint to its match; the caption counts the green ones,
    and summed over every pair they are the run's correct keypoints."""
    from harness.results.panels import draw_examples

    model = ModelHandle.random_init("vit_cpu_tiny", seed=0)
    proto = Correspondence.from_preset("synth", QUICK)
    (res,) = proto.run(model, spair_tiny)
    examples = proto.examples(model, spair_tiny, count=18, seed=0)  # every pair of the tiny set
    assert len(examples) == 18
    total = counted = 0
    for ex in examples:
        (panel,) = ex.panels
        assert panel.image.shape == (128, 256, 3) and panel.lines.shape == (len(panel.line_ok), 4)
        assert (panel.lines[:, 2] >= 128).all() and (panel.lines[:, 0] < 128).all()  # source left, target right
        hits, n = (int(v) for v in panel.text.split()[:3:2])
        assert hits == int(panel.line_ok.sum()) and n == len(panel.line_ok)
        total, counted = total + hits, counted + n
    block = res.per_image
    cells, cell, hits = block["cells"], decode_array(block["cell"]), decode_array(block["hits"])
    in_all = np.array([cells[c][0] == "all" for c in cell])
    assert counted == res.params["n_keypoints"]["all"] and total == int(hits[in_all].sum())
    assert draw_examples(examples[:2], tmp_path / "corr.png", "correspondence").stat().st_size > 0


def test_a_model_without_a_patch_grid_is_refused_before_any_work(tmp_path):
    class Pooled(torch.nn.Module):
        def forward(self, x):
            return x.mean((2, 3))

    model = ModelHandle.random_init("vit_cpu_tiny")
    model.backbone = Pooled()
    with pytest.raises(NotApplicable, match="patch grid"):
        Correspondence.from_preset("synth", QUICK).run(model, tmp_path / "nowhere")


def test_settings_are_checked(spair_tiny, tmp_path):
    model = ModelHandle.random_init("vit_cpu_tiny")
    with pytest.raises(ConfigError, match="smaller than the model's patch size 8"):
        Correspondence.from_preset("synth", {**QUICK, "image_size": 4}).run(model, tmp_path / "nowhere")
    with pytest.raises(ConfigError, match="no pairs in split"):
        Correspondence.from_preset("synth", {**QUICK, "categories": ["sheep"]}).run(model, spair_tiny)
    with pytest.raises(ConfigError, match="alpha"):
        Correspondence.from_preset("synth", {"alpha": 0})


def _copy(src: Path, tmp_path: Path) -> Path:
    root = tmp_path / "spair"
    shutil.copytree(src, root)
    return root


def test_bad_layouts_are_refused_with_one_line(spair_tiny, tmp_path, isolated_home):
    with pytest.raises(DataError, match="PairAnnotation/test") as err:
        SPair71k(tmp_path, "test")
    assert "\n" not in str(err.value)
    with pytest.raises(DataError, match="split 'tst' is unknown"):
        SPair71k(spair_tiny, "tst")
    root = _copy(spair_tiny, tmp_path)
    first = sorted((root / "PairAnnotation" / "test").glob("*.json"))[0]
    ann = json.loads(first.read_text())
    first.write_text(json.dumps({k: v for k, v in ann.items() if k != "trg_bndbox"}))
    with pytest.raises(DataError, match="trg_bndbox"):
        SPair71k(root, "test")
    first.write_text(json.dumps(ann))
    target = root / "ImageAnnotation" / ann["category"] / ann["trg_imname"].replace(".jpg", ".json")
    image_ann = json.loads(target.read_text())
    target.write_text(json.dumps({**image_ann, "kps": {k: v for k, v in image_ann["kps"].items() if k != "7"}}))
    model = ModelHandle.random_init("vit_cpu_tiny")
    with pytest.raises(DataError, match="7 keypoint slots|8 and 7 keypoint slots"):
        Correspondence.from_preset("synth", QUICK).run(model, root)
    target.write_text(json.dumps(image_ann))
    next((root / "JPEGImages").rglob("*.jpg")).unlink()
    with pytest.raises(DataError, match="does not exist"):
        Correspondence.from_preset("synth", QUICK).run(model, root)


def test_cli_bad_layout_one_error_line_exit_2_no_record(spair_tiny, isolated_home, capsys):
    root = _copy(spair_tiny, isolated_home)
    shutil.rmtree(root / "ImageAnnotation")
    rc = main(["--threads", "1", "eval", "--protocol", "correspondence", "--preset", "synth", "--dataset", "spair71k",
               "--data-root", str(root), "--random-init", "vit_cpu_tiny", "--set", "progress=false"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and err[0].startswith("error:") and "ImageAnnotation" in err[0]
    runs = isolated_home / "results" / "runs"
    assert not runs.exists() or not any(runs.iterdir())


# ----------------------------------------------------------------------------- parity with Probe3D
@pytest.fixture(scope="module")
def fixture() -> dict:
    return json.loads(FIXTURE.read_text())


def test_matching_equals_probe3d_compute_errors(fixture):
    """Stored feature maps (exact on a 1/64 grid), keypoints and scale: the errors of the
    keypoints visible in both images, as compute_errors' error_same, to float32 precision."""
    assert fixture["matching"], "no matching cases"
    for case in fixture["matching"]:
        f_src, f_trg = (torch.tensor(f, dtype=torch.float32) for f in case["feats"])
        kps_src, kps_trg = (np.array(k, dtype=np.int64) for k in case["kps"])
        errors = pair_errors(f_src, f_trg, kps_src, kps_trg, case["image_size"], case["scale"])
        np.testing.assert_allclose(errors, case["error_same"], rtol=1e-6, atol=1e-7)
        hits = int((errors.astype(np.float32) < np.float32(0.1)).sum())
        assert len(errors) and hits == round(case["recall"] / 100 * len(errors))


def test_reader_and_images_equal_probe3d_spairdataset(fixture, tmp_path):
    """The parity set written here decodes to the pixels the fixture was made on; the pairs drawn,
    keypoints, threshold scales and the transformed images equal SPairDataset's."""
    root = tmp_path / "parity"
    write_parity_set(root)
    data = SPair71k(root, "test")
    from harness.data.io import load_rgb

    for key, digest in fixture["dataset"]["pixel_sha256"].items():
        cat, name = key.split("/")
        assert pixel_digest(load_rgb(data.image_path(cat, name))) == digest, (
            f"{key}: this machine's JPEG codec writes or decodes other pixels than the fixture's")
    transform = SquareResize(PARITY_IMAGE_SIZE, PARITY_PATCH)
    for cell in fixture["dataset"]["cells"]:
        vp = None if cell["viewpoint"] == "all" else int(cell["viewpoint"])
        chosen = select_pairs(data.pairs, cell["category"], vp, PARITY_INSTANCES, 20)
        assert [p.name for p in chosen] == cell["pairs"]
        for p, inst in zip(chosen, cell["instances"]):
            for image, kps_key, stats_key in ((p.source, "kps_i", "img_i"), (p.target, "kps_j", "img_j")):
                img = load_rgb(data.image_path(p.category, image))
                kps = scaled_keypoints(data.keypoints(p.category, image), (img.height, img.width), PARITY_IMAGE_SIZE)
                assert kps.tolist() == inst[kps_key]
                x = transform(img)
                pad = (PARITY_PATCH - PARITY_IMAGE_SIZE % PARITY_PATCH) % PARITY_PATCH
                inner = x[:, pad // 2:pad // 2 + PARITY_IMAGE_SIZE, pad // 2:pad // 2 + PARITY_IMAGE_SIZE]
                np.testing.assert_allclose([float(inner.sum()), float((inner * inner).sum())], inst[stats_key],
                                           rtol=1e-5)
            assert threshold_scale(p.target_box, p.target_size) == pytest.approx(inst["thresh_scale"], rel=1e-12)


def test_protocol_equals_probe3d_end_to_end_with_a_stand_in_model(fixture, tmp_path, isolated_home):
    """evaluate_dataset per (category, bin) and main()'s mean over categories, with the stand-in
    model on both sides: the same keypoint counts, so the same PCK in every cell."""
    root = tmp_path / "parity"
    write_parity_set(root)
    proto = Correspondence.from_preset("probe3d", {"image_size": PARITY_IMAGE_SIZE,
                                                   "num_instances": PARITY_INSTANCES, "progress": False})
    (res,) = proto.run(standin_model(), root)
    official = fixture["end_to_end"]
    for cell in official["cells"]:
        bin_name = "all" if cell["viewpoint"] == "all" else f"vp{cell['viewpoint']}"
        assert res.params["per_category"][cell["category"]][bin_name] == pytest.approx(cell["recall"], abs=1e-4)
    for metric, value in official["mean_over_categories"].items():
        assert res.metrics[metric] == pytest.approx(value, abs=1e-4)


def test_a_grid_below_the_minimum_is_flagged_in_the_record_and_the_console(spair_tiny, isolated_home, capsys):
    """vit_cpu_tiny (stride 8) at image_size 32: a 4 x 4 grid, below 1 / (2 alpha) = 5 cells a side."""
    from harness.results.pair_status import undefined_parts
    from harness.running.evaluate import evaluate

    model = ModelHandle.random_init("vit_cpu_tiny", seed=0)
    assert Correspondence.from_preset("synth", QUICK).coarse_grid(model.name, 8) is None  # 64 px: 8 cells
    (rec,), _ = evaluate(model, Correspondence.from_preset("synth", {**QUICK, "image_size": 32}), spair_tiny)
    (flag,) = rec["flags"]
    assert flag.startswith(f"correspondence: the feature grid of model {model.name} is 4x4 cells (stride 8 on 32x32")
    assert "minimum of 5 cells a side" in flag and rec["metrics"]["PCK"] is not None
    assert f"note: {flag}" in capsys.readouterr().err
    (part,) = undefined_parts([rec])
    assert part.state == "flagged" and part.reason == flag
