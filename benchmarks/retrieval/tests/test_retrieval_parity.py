"""image_retrieval and copy_detection against the official code's numbers
(benchmarks/retrieval/fixtures/, written by benchmarks/retrieval/reference/retrieval_reference.py from
facebookresearch/dino and filipradenovic/revisitop; MANIFEST.json holds every file's sha256)."""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest

from benchmarks.retrieval.copy_detection import CopyDetection
from harness.data.copydays import BLOCKS, Copydays
from benchmarks.retrieval.features import l2n
from benchmarks.retrieval.image_retrieval import ImageRetrieval
from harness.data.revisited import RevisitedOxford
from benchmarks.retrieval.revisitop import aps_from_ranks, difficulty_gnd, mean_ap
from harness.models.handle import ModelHandle
from harness.per_image import decode_array

FIX = Path(__file__).parent.parent / "fixtures"
DATA = FIX / "data"
FEATURE_TOL = 1e-5   # the harness ViT vs DINO's VisionTransformer, same weights (float32)
AP_TOL = 1e-9        # identical rankings: the same trapezoids summed in another order


def _load(name: str) -> dict:
    return json.loads((FIX / name).read_text())


def _aps(values) -> np.ndarray:
    return np.array([np.nan if v is None else v for v in values], dtype=np.float64)


def test_manifest_matches_every_fixture_file():
    manifest = json.loads((FIX / "MANIFEST.json").read_text())
    on_disk = {p.relative_to(FIX).as_posix() for p in FIX.rglob("*") if p.is_file()} - {"MANIFEST.json"}
    assert set(manifest) == on_disk
    for name, digest in manifest.items():
        assert hashlib.sha256((FIX / name).read_bytes()).hexdigest() == digest, name


def test_compute_map_on_identical_rankings():
    fixture = _load("compute_map.json")
    assert fixture["provenance"]["commits"]["filipradenovic/revisitop"]
    worst = 0.0
    for case in fixture["cases"]:
        ranks = np.array(case["ranks"])
        gnd = [{k: np.array(v, dtype=np.int64) for k, v in g.items()} for g in case["gnd"]]
        for setup, official in case["official"].items():
            mine = aps_from_ranks(ranks, difficulty_gnd(gnd, setup))
            theirs = _aps(official["aps"])
            assert np.array_equal(np.isnan(mine), np.isnan(theirs)), setup
            worst = max(worst, np.nanmax(np.abs(mine - theirs)), abs(mean_ap(mine) - official["map"]))
    assert worst <= AP_TOL


@pytest.fixture(scope="module")
def tiny_vit():
    return ModelHandle.random_init("vit_cpu_tiny", seed=0)  # the weights the generator ran


@pytest.mark.parametrize("run", ["single", "multiscale"])
def test_image_retrieval_end_to_end(run, tiny_vit, tmp_path, monkeypatch):
    monkeypatch.setenv("SSL_BENCH_HOME", str(tmp_path))
    fixture = _load("image_retrieval_e2e.json")
    official = fixture["runs"][run]
    proto = ImageRetrieval.from_preset("dino", {"imsize": fixture["imsize"], "multiscale": run == "multiscale",
                                                "progress": False})
    db, q = RevisitedOxford(DATA, "database"), RevisitedOxford(DATA, "query")
    for source, key in ((db, "database_features"), (q, "query_features")):
        mine = proto.features(tiny_vit, source, 8, key)
        assert np.abs(mine - l2n(np.array(official[key]))).max() <= FEATURE_TOL
    # the search and the evaluation on the official features: the same ranks, the same APs
    aps = proto.search(l2n(np.array(official["database_features"])), l2n(np.array(official["query_features"])),
                       db.gnd, "cpu")
    ranks = np.array(official["ranks"])
    for setup in ("easy", "medium", "hard"):
        assert np.allclose(aps[setup], _aps(official[setup]["aps"]), atol=AP_TOL, equal_nan=True), setup
        assert np.allclose(aps_from_ranks(ranks, difficulty_gnd(db.gnd, setup)), aps[setup], atol=AP_TOL,
                           equal_nan=True)
    # the protocol end to end (its own features) gives the script's mAPs
    (result,) = proto.run(tiny_vit, DATA)
    for setup, metric in (("easy", "mAP_E"), ("medium", "mAP_M"), ("hard", "mAP_H")):
        assert result.metrics[metric] == pytest.approx(100.0 * official[setup]["map"], abs=1e-6)
    block = result.per_image
    values = decode_array(block["values"])
    assert block["metrics"] == ["mAP_E", "mAP_M", "mAP_H"] and values.shape == (len(q), 3)
    assert np.allclose(values[:, 1], _aps(official["medium"]["aps"]), atol=AP_TOL)


def test_copy_detection_end_to_end(tiny_vit, tmp_path, monkeypatch):
    monkeypatch.setenv("SSL_BENCH_HOME", str(tmp_path))
    fixture = _load("copy_detection_e2e.json")
    proto = CopyDetection.from_preset("dino", {"imsize": fixture["imsize"], "whitening": "whitening",
                                               "n_whitening": None, "distractors": "distractors",
                                               "n_distractors": None, "progress": False})
    queries = Copydays(DATA, "query")
    ext = fixture["extractions"]
    official_q = np.concatenate([np.array(e["features"]) for e in ext[:len(BLOCKS)]])
    official_db = np.concatenate([np.array(e["features"]) for e in ext[len(BLOCKS):len(BLOCKS) + 2]])
    assert np.abs(proto.features(tiny_vit, queries, 8, "q") - official_q).max() <= FEATURE_TOL
    # the script lists distractors and whitening images with os.listdir: its order here
    assert sorted(ext[len(BLOCKS) + 1]["files"]) == [f"distractors/{p.name}" for p in
                                                       sorted((DATA / "distractors").iterdir())]
    whitening = proto.folder(DATA, "whitening", None, "whitening")
    w = proto.features(tiny_vit, whitening, 8, "w")
    aps = proto.score(official_q, official_db, w, queries)
    for b in BLOCKS:
        assert np.allclose(aps[b], fixture["blocks"][b]["aps"], atol=AP_TOL), b
    (result,) = proto.run(tiny_vit, DATA)
    assert result.metrics["mAP_strong"] == pytest.approx(100.0 * fixture["blocks"]["strong"]["map"], abs=1e-6)
    assert np.allclose(decode_array(result.per_image["values"])[:, 0], fixture["blocks"]["strong"]["aps"],
                       atol=AP_TOL)
