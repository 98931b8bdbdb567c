"""Unsupervised classification (benchmarks/unsup_cls): the four scores against the official
unsup_cls.py eval_pred (benchmarks/unsup_cls/fixtures/unsup_cls_eval_pred.json), the re-matching bootstrap kind,
the head read from an official-layout checkpoint, k-means, and the bad inputs."""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest
import torch

from harness.cli import main
from harness.errors import ConfigError, NotApplicable
from harness.models.handle import ModelHandle
from harness.per_image import read_per_image
from benchmarks.unsup_cls.metrics import AccUndefined, assignment_scores, hungarian_acc, contingency
from benchmarks.unsup_cls.per_image_kind import clusters_block
from benchmarks.unsup_cls.protocol import UnsupClsProtocol
from image_folders import make_image_folder

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "unsup_cls_eval_pred.json"
CASES = json.loads(FIXTURE.read_text())["cases"]
TOL = 1e-12  # same formulas in the same order as scikit-learn; ACC is a count ratio


def _arrays(case):
    y, p = np.asarray(case["labels"], dtype=np.int64), np.asarray(case["clusters"], dtype=np.int64)
    h = hashlib.sha256()
    for a in (y, p):
        h.update(a.astype("<i8").tobytes())
    assert h.hexdigest() == case["inputs_sha256"], f"{case['name']}: fixture inputs changed"
    return y, p


@pytest.mark.parametrize("case", CASES, ids=lambda c: c["name"])
def test_scores_equal_the_official_eval_pred(case):
    y, p = _arrays(case)
    copies = case["copies"]  # the official function scored this many stacked copies
    if "official_acc_error" in case:  # get_y_preds indexes out of range: so do we, by raising
        with pytest.raises(AccUndefined):
            assignment_scores(y, p)
        table, lv, cv = contingency(y, p)
        from benchmarks.unsup_cls.metrics import scores
        got = scores(table, lv, cv)
        assert np.isnan(got["ACC"])
    else:
        got = assignment_scores(y, p, copies=copies)
    for m, want in case["official"].items():
        assert abs(got[m] - want) <= TOL, (m, got[m], want)


def test_copies_move_ari_and_fmi_only():
    case = next(c for c in CASES if c["copies"] == 8)
    y, p = _arrays(case)
    once, eight = assignment_scores(y, p), assignment_scores(y, p, copies=8)
    assert once["ACC"] == eight["ACC"] and once["NMI"] == pytest.approx(eight["NMI"], abs=1e-12)
    assert once["ARI"] < eight["ARI"] and once["FMI"] < eight["FMI"]


def test_hungarian_acc_is_the_official_where_no_quirk_applies():
    for case in CASES:
        if case["kind"] == "noisy":
            y, p = _arrays(case)
            assert hungarian_acc(contingency(y, p)[0]) == pytest.approx(case["official"]["ACC"], abs=TOL)
    # cluster 0 unused: the official shift misreads the matching; the fix does not
    case = next(c for c in CASES if c["kind"] == "no_zero")
    y, p = _arrays(case)
    assert hungarian_acc(contingency(y, p)[0]) > case["official"]["ACC"] + 0.3


def test_per_image_kind_gives_back_the_numbers_and_rematches():
    case = next(c for c in CASES if c["name"] == "eight_copies_c10")
    y, p = _arrays(case)
    stats = read_per_image(json.loads(json.dumps(clusters_block(y, p, matching="official", copies=case["copies"]))))
    for m in ("ACC", "ARI", "NMI", "FMI"):
        assert stats.metric_of_weights(np.ones((1, len(y))), m)[0] == pytest.approx(100 * case["official"][m], abs=1e-9)
    # a resample holding only the images of clusters 0..4 (weights 0 elsewhere) is matched anew
    w = (p < 5).astype(float)[None]
    sub = assignment_scores(y[p < 5], p[p < 5], "hungarian", copies=8)
    stats_h = read_per_image(clusters_block(y, p, matching="hungarian", copies=8))
    assert stats_h.metric_of_weights(w, "ACC")[0] == pytest.approx(100 * sub["ACC"])
    from harness.results.bootstrap import intervals
    iv = intervals(stats, ["ACC", "NMI"], resamples=200)
    assert iv["ACC"].low < 100 * case["official"]["ACC"] < iv["ACC"].high


# ----------------------------------------------------------------------------- protocol
@pytest.fixture
def folder(tmp_path, monkeypatch):
    monkeypatch.setenv("SSL_BENCH_HOME", str(tmp_path / "home"))
    return make_image_folder(tmp_path / "data", splits=(("train", 1), ("val", 8)))


def _head_file(path: Path, model: ModelHandle, out_dim: int, seed: int = 0) -> Path:
    """An official-layout training checkpoint ({'teacher': backbone.* + head.*}) for ``model``."""
    g = torch.Generator().manual_seed(seed)
    d = model.backbone.embed_dim
    head = {"head.mlp.0.weight": torch.randn(32, d, generator=g), "head.mlp.0.bias": torch.zeros(32),
            "head.mlp.2.weight": torch.randn(32, 32, generator=g), "head.mlp.2.bias": torch.zeros(32),
            "head.mlp.4.weight": torch.randn(8, 32, generator=g), "head.mlp.4.bias": torch.zeros(8),
            "head.last_layer.weight_g": torch.ones(out_dim, 1),
            "head.last_layer.weight_v": torch.randn(out_dim, 8, generator=g)}
    teacher = {f"backbone.{k}": v for k, v in model.backbone.backbone_state_dict().items()}
    torch.save({"teacher": {**teacher, **head}, "epoch": 1}, path)
    return path


def test_kmeans_and_head_on_a_tiny_set(folder, tmp_path):
    model = ModelHandle.random_init("vit_cpu_tiny", seed=0)
    ckpt = _head_file(tmp_path / "checkpoint.pth", model, out_dim=3)
    proto = UnsupClsProtocol.from_preset("synth", {"dataset": "imagefolder", "resize": 32, "crop": 32,
                                                   "assignments": ["head", "kmeans"], "progress": False,
                                                   "head_checkpoint": str(ckpt)})
    results = proto.run(model, folder)
    assert [r.variant for r in results] == [{"assignment": "head"}, {"assignment": "kmeans"}]
    for r in results:
        assert set(r.metrics) == {"ACC", "ARI", "NMI", "FMI"} and r.params["n_images"] == 24
        stats = read_per_image(r.per_image)
        for m, v in r.metrics.items():
            assert stats.metric_of_weights(np.ones((1, 24)), m)[0] == pytest.approx(v, abs=1e-9)
    assert results[0].params["head_out_dim"] == 3 and len(results[0].params["head_sha256"]) == 64
    again = proto.run(model, folder)  # seeded k-means, cached features: the same numbers
    assert [r.metrics for r in again] == [r.metrics for r in results]


def test_head_problems_are_refused(folder, tmp_path):
    model = ModelHandle.random_init("vit_cpu_tiny", seed=0)
    base = {"dataset": "imagefolder", "resize": 32, "crop": 32, "progress": False}
    with pytest.raises(NotApplicable, match="has no projection head"):
        UnsupClsProtocol.from_preset("ibot", base).run(model, folder)
    wide = _head_file(tmp_path / "wide.pth", model, out_dim=7)
    with pytest.raises(ConfigError, match="7-way head on 3 classes"):
        UnsupClsProtocol.from_preset("ibot", {**base, "head_checkpoint": str(wide)}).run(model, folder)
    other = _head_file(tmp_path / "other.pth", ModelHandle.random_init("vit_cpu_tiny", seed=1), out_dim=3)
    with pytest.raises(ConfigError, match="is not model"):
        UnsupClsProtocol.from_preset("ibot", {**base, "head_checkpoint": str(other)}).run(model, folder)
    # the opt-in matching takes a head of any width
    r, = UnsupClsProtocol.from_preset("ibot", {**base, "head_checkpoint": str(wide), "acc_matching": "hungarian"}
                                      ).run(model, folder)
    assert 0 <= r.metrics["ACC"] <= 100


def test_fingerprints():
    ibot = UnsupClsProtocol.from_preset("ibot", {"dataset": "imagenet"})
    for change in ({"acc_matching": "hungarian"}, {"kmeans_seed": 1}, {"crop": 192}, {"head_branch": "student"},
                   {"gather_copies": 1}):
        changed = UnsupClsProtocol.from_preset("ibot", {"dataset": "imagenet", **change})
        assert changed.fingerprint() != ibot.fingerprint()
    for same in ({"batch_size": 8}, {"assignments": ["kmeans"]}, {"head_checkpoint": "/x.pth"}):
        assert UnsupClsProtocol.from_preset("ibot", {"dataset": "imagenet", **same}).fingerprint() == ibot.fingerprint()


def _no_records(home: Path) -> bool:
    runs = home / "results" / "runs"
    return not runs.exists() or not any(runs.iterdir())


@pytest.mark.parametrize("extra, expected", [
    ((), "has no projection head"),
    (("--set", "head_checkpoint=/nowhere/checkpoint.pth"), "/nowhere/checkpoint.pth is not a file")])
def test_cli_head_clustering_without_a_head(isolated_home, synth_tiny, capsys, extra, expected):
    rc = main(["--threads", "1", "eval", "--protocol", "unsup_cls", "--preset", "ibot", "--dataset", "imagefolder",
               "--data-root", str(synth_tiny / "imagenet"), "--random-init", "vit_cpu_tiny",
               "--set", "progress=false", "--set", "resize=64", "--set", "crop=64", *extra])
    err = capsys.readouterr().err
    assert rc == 2 and expected in err
    assert [line for line in err.splitlines() if line.startswith("error:")] and _no_records(isolated_home)


def test_cli_bad_layout(isolated_home, tmp_path, capsys):
    (tmp_path / "flat").mkdir()
    rc = main(["--threads", "1", "eval", "--protocol", "unsup_cls", "--preset", "synth", "--dataset", "imagefolder",
               "--data-root", str(tmp_path / "flat"), "--random-init", "vit_cpu_tiny", "--set", "progress=false"])
    err = capsys.readouterr().err
    assert rc == 2 and "error:" in err and _no_records(isolated_home)


def test_chance_row_is_a_seeded_random_assignment(folder):
    rows = UnsupClsProtocol.from_preset("synth", {"dataset": "imagefolder"}).chance_results(folder)
    assert [r.variant for r in rows] == [{"assignment": "kmeans"}] and rows[0].seed == 0
    again = UnsupClsProtocol.from_preset("synth", {"dataset": "imagefolder"}).chance_results(folder)
    assert again[0].metrics == rows[0].metrics and 100 / 3 <= rows[0].metrics["ACC"] <= 100


def test_an_imported_checkpoint_finds_its_head_in_the_file_it_came_from(folder, tmp_path):
    from harness.models.importers import import_checkpoint

    source = ModelHandle.random_init("vit_cpu_tiny", seed=0)
    official = _head_file(tmp_path / "checkpoint.pth", source, out_dim=3)
    import_checkpoint(official, tmp_path / "model", arch="vit_cpu_tiny")
    model = ModelHandle.from_checkpoint(tmp_path / "model.safetensors")
    r, = UnsupClsProtocol.from_preset("ibot", {"dataset": "imagefolder", "resize": 32, "crop": 32,
                                               "progress": False}).run(model, folder)
    assert r.params["head_source"] == str(official) and r.params["head_out_dim"] == 3
    # another file beside it is refused by its sha256
    other = _head_file(tmp_path / "other.pth", source, out_dim=3, seed=5)
    with pytest.raises(ConfigError, match="is not the file model"):
        UnsupClsProtocol.from_preset("ibot", {"dataset": "imagefolder", "resize": 32, "crop": 32, "progress": False,
                                              "head_checkpoint": str(other)}).run(model, folder)


def test_an_undefined_official_acc_is_null_with_its_reason_the_other_scores_kept():
    """SynthScenes tiny's few validation classes: the official matching indexes out of range for
    some assignments; the record keeps ARI, NMI and FMI and says why ACC has no value."""
    labels = np.array([0, 0, 1, 1, 1, 0])
    clusters = np.array([0, 0, 5, 5, 5, 0])  # a cluster value - min beyond the two labels present
    proto = UnsupClsProtocol.from_preset("synth")
    res = proto._result("kmeans", labels, clusters, {}, 0.0, 0.0)
    assert res.metrics["ACC"] is None and "beyond the 2 labels" in res.metrics_undefined["ACC"]
    assert "acc_matching=hungarian" in res.metrics_undefined["ACC"]
    assert res.metrics["ARI"] == pytest.approx(100.0) and res.metrics["NMI"] == pytest.approx(100.0)
