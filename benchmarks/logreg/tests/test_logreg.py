"""Logistic regression (benchmarks/logreg): the current cyanure against the official
eval_logistic_regression.py run under cyanure 0.22 (benchmarks/logreg/fixtures/logreg_cyanure022.json), the
protocol on a tiny set, and the refusal where cyanure is missing."""
from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import numpy as np
import pytest

from harness.cli import main
from harness.errors import ConfigError
from harness.models.handle import ModelHandle
from harness.per_image import read_per_image
from image_folders import make_image_folder

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
DATA = json.loads((FIXTURES / "logreg_cyanure022.json").read_text())
# Same accuracy per lambda: at most this many test images predicted differently from the
# official run (measured: 0), and the weights within this relative difference (measured: 1e-6).
MAX_CHANGED_PREDICTIONS = 0
WEIGHTS_RTOL = 1e-4


def _features():
    path = FIXTURES / DATA["features"]
    assert hashlib.sha256(path.read_bytes()).hexdigest() == DATA["features_sha256"], "features file changed"
    return np.load(path)


def _skip_without_cyanure():
    """Found without importing it: the fits run in child processes, and its import takes a second."""
    from benchmarks.logreg.solver import require_cyanure

    try:
        require_cyanure()
    except ConfigError:
        pytest.skip("the logreg extra (cyanure) is not installed")


@pytest.fixture(scope="module")
def current_cyanure_fits():
    _skip_without_cyanure()
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    from cyanure_fits import fit_every_set

    _features()  # checks the features file's sha256 first
    sets = {name: [row["lambda"] for row in rows] for name, rows in DATA["sets"].items()}
    # in one child process, as the protocol fits (solver.fit_sweep says why)
    with ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn")) as pool:
        return pool.submit(fit_every_set, str(FIXTURES / DATA["features"]), sets).result()


@pytest.mark.parametrize("name", sorted(DATA["sets"]))
def test_accuracy_per_lambda_equals_the_official_under_cyanure_022(name, current_cyanure_fits):
    vy = _features()[f"{name}_test_y"]
    for row, fit in zip(DATA["sets"][name], current_cyanure_fits[name]):
        assert np.mean(fit.predictions == vy) == pytest.approx(row["accuracy"], abs=1e-12), row["lambda"]
        assert (fit.predictions != np.asarray(row["predictions"])).sum() <= MAX_CHANGED_PREDICTIONS
        w = np.asarray(row["weights"])
        assert np.abs(fit.weights - w).max() <= WEIGHTS_RTOL * np.abs(w).max()


@pytest.fixture
def folder(tmp_path, monkeypatch):
    monkeypatch.setenv("SSL_BENCH_HOME", str(tmp_path / "home"))
    return make_image_folder(tmp_path / "data", splits=(("train", 6), ("val", 3)))


def test_protocol_reports_each_lambda(folder):
    _skip_without_cyanure()
    from benchmarks.logreg.protocol import LogRegProtocol

    proto = LogRegProtocol.from_preset("synth", {"dataset": "imagefolder", "resize": 32, "crop": 32,
                                                 "progress": False, "threads": 1})
    results = proto.run(ModelHandle.random_init("vit_cpu_tiny", seed=0), folder)
    assert [r.variant for r in results] == [{"lambda": lam, "feature": "cls"} for lam in (0.01, 0.1, 1.0)]
    for r in results:
        stats = read_per_image(r.per_image)
        assert stats.images == 9 and stats.metric_of_weights(np.ones((1, 9)), "top1")[0] == r.metrics["top1"]
        assert r.params["n_train"] == 18 and 0 <= r.params["train_top1"] <= 100


def test_fingerprints():
    from benchmarks.logreg.protocol import LogRegProtocol

    ibot = LogRegProtocol.from_preset("ibot", {"dataset": "imagenet"})
    for change in ({"avgpool_patchtokens": 2}, {"epochs": 50}, {"crop": 192}, {"seed": 1}):
        assert LogRegProtocol.from_preset("ibot", {"dataset": "imagenet", **change}).fingerprint() != ibot.fingerprint()
    for same in ({"lambdas": [0.1]}, {"threads": 1}, {"batch_size": 8}):
        assert LogRegProtocol.from_preset("ibot", {"dataset": "imagenet", **same}).fingerprint() == ibot.fingerprint()


def test_missing_cyanure_is_one_error_line(isolated_home, synth_tiny, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "cyanure.estimators", None)  # import fails as if not installed
    from benchmarks.logreg.solver import require_cyanure

    with pytest.raises(ConfigError, match=r"pip install 'ssl-bench\[logreg\]'"):
        require_cyanure()
    rc = main(["--threads", "1", "eval", "--protocol", "logreg", "--preset", "synth", "--dataset", "imagefolder",
               "--data-root", str(synth_tiny / "imagenet"), "--random-init", "vit_cpu_tiny", "--set", "progress=false"])
    err = capsys.readouterr().err
    assert rc == 2 and len([x for x in err.splitlines() if x.startswith("error:")]) == 1 and "cyanure" in err
    runs = isolated_home / "results" / "runs"
    assert not runs.exists() or not any(runs.iterdir())


def test_cli_bad_layout(isolated_home, tmp_path, capsys):
    (tmp_path / "flat").mkdir()
    rc = main(["--threads", "1", "eval", "--protocol", "logreg", "--preset", "synth", "--dataset", "imagefolder",
               "--data-root", str(tmp_path / "flat"), "--random-init", "vit_cpu_tiny", "--set", "progress=false"])
    assert rc == 2 and "error:" in capsys.readouterr().err


# ----------------------------------------------------------------------------- named training subsets
def test_a_named_subset_restricts_the_training_split_and_enters_the_fingerprint(folder, tmp_path):
    from benchmarks.logreg.protocol import LogRegProtocol

    train = sorted((folder / "train").rglob("*.png"))
    listed = [p.name for p in train if p.stem.endswith(("_0", "_1", "_2"))]  # 3 per class
    a, b = tmp_path / "a" / "1percent.txt", tmp_path / "b" / "1percent.txt"
    for path, names in ((a, listed), (b, listed[::-1])):
        path.parent.mkdir()
        path.write_text("\n".join(names) + "\n")
    base = {"dataset": "imagefolder", "resize": 32, "crop": 32, "progress": False, "threads": 1, "lambdas": [0.1]}
    proto = LogRegProtocol.from_preset("synth", {**base, "train_subset": str(a)})
    splits, (train_x, _), _ = proto.features(ModelHandle.random_init("vit_cpu_tiny", seed=0), folder)
    assert len(train_x) == len(splits.train_labels) == 9 and proto.train_subset().name == "1percent"
    assert sorted(splits.train_labels.tolist()) == [0, 0, 0, 1, 1, 1, 2, 2, 2]
    whole = LogRegProtocol.from_preset("synth", base).fingerprint()
    assert proto.fingerprint() != whole  # the subset is part of what was measured
    # the same names in another order and place: the same subset, the same fingerprint
    assert LogRegProtocol.from_preset("synth", {**base, "train_subset": str(b)}).fingerprint() == proto.fingerprint()
    c = tmp_path / "c.txt"
    c.write_text("\n".join(listed[:-1]))
    assert LogRegProtocol.from_preset("synth", {**base, "train_subset": str(c)}).fingerprint() != proto.fingerprint()


def test_a_subset_naming_files_not_in_the_split_is_refused(folder, tmp_path):
    from benchmarks.logreg.protocol import LogRegProtocol
    from harness.errors import DataError

    bad = tmp_path / "bad.txt"
    bad.write_text("n01440764_10026.JPEG\n")
    proto = LogRegProtocol.from_preset("synth", {"dataset": "imagefolder", "train_subset": str(bad), "progress": False})
    with pytest.raises(DataError, match="not in the training split"):
        proto.features(ModelHandle.random_init("vit_cpu_tiny", seed=0), folder)


def test_cli_missing_simclr_subset_list_is_one_error_line(isolated_home, synth_tiny, capsys):
    rc = main(["--threads", "1", "eval", "--protocol", "logreg", "--preset", "synth", "--dataset", "imagefolder",
               "--data-root", str(synth_tiny / "imagenet"), "--random-init", "vit_cpu_tiny", "--set", "progress=false",
               "--set", "train_subset=imagenet_1pct"])
    err = capsys.readouterr().err
    assert rc == 2 and [x for x in err.splitlines() if x.startswith("error:")] and "1percent.txt" in err
    runs = isolated_home / "results" / "runs"
    assert not runs.exists() or not any(runs.iterdir())


def test_chance_row_is_a_uniform_guess(folder):
    from benchmarks.logreg.protocol import LogRegProtocol

    rows = LogRegProtocol.from_preset("synth", {"dataset": "imagefolder"}).chance_results(folder)
    assert [r.variant["lambda"] for r in rows] == [0.01, 0.1, 1.0]
    assert all(r.metrics == {"top1": pytest.approx(100 / 3)} for r in rows)
