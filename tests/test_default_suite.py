"""End to end: the default suite (shortened pretraining) from nothing to a leaderboard,
then again from the caches; and DINO on SynthScenes beats its random init."""
import os
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

REPO = Path(__file__).resolve().parent.parent


@pytest.mark.slow
def test_default_suite_end_to_end_then_cached(tmp_path):
    env = dict(os.environ, SSL_BENCH_HOME=str(tmp_path / "home"), SSL_BENCH_RESULTS=str(tmp_path / "results"))
    cmd = [sys.executable, str(REPO / "run_benchmark.py"), "run", "--no-progress",
           "--set", "pretrain_overrides=[train.max_steps=40]"]
    first = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=1800)
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    for name in ("leaderboard.csv", "leaderboard.md", "leaderboard.html"):
        assert (tmp_path / "results" / name).is_file()
    assert list((tmp_path / "results").glob("*.png"))
    df = pd.read_csv(tmp_path / "results" / "leaderboard.csv", header=None)
    text = (tmp_path / "results" / "leaderboard.md").read_text()
    for model in ("random_init", "dino", "ibot", "cribo", "synclr"):
        assert model in text
    for protocol in ("knn", "linear", "dense_nn"):
        assert protocol in text
    assert len(df) > 5
    t0 = time.perf_counter()
    second = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert second.returncode == 0, second.stderr[-3000:]
    assert "using cached checkpoint" in second.stdout and "(cached)" in second.stdout
    assert time.perf_counter() - t0 < 120


@pytest.mark.slow
def test_dino_beats_random_init_on_synthscenes(tmp_path, monkeypatch):
    from benchmarks.perf.learning_curve import main as learning_curve

    monkeypatch.setenv("SSL_BENCH_HOME", str(tmp_path / "home"))
    out = tmp_path / "curve.csv"
    learning_curve(["--steps", "0", "400", "--work", str(tmp_path / "work"), "--out", str(out)])
    df = pd.read_csv(out).set_index("steps")
    assert df.loc[400, "dense_nn_miou"] > df.loc[0, "dense_nn_miou"] + 2.0
    assert df.loc[400, "knn_avgpool_top1"] > df.loc[0, "knn_avgpool_top1"]
