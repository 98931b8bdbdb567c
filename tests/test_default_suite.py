"""End to end: the default suite (pretraining cut to a few steps) from nothing to a
leaderboard, then again from the caches."""
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
           "--set", "pretrain_overrides=[train.epochs=2, train.max_steps=12]"]
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
