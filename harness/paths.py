"""Where generated things live. Everything is overridable by environment variables."""
from __future__ import annotations

import os
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent


def home() -> Path:
    """Cache root for generated data, pretrained checkpoints and feature caches."""
    return Path(os.environ.get("SSL_BENCH_HOME", Path.home() / ".cache" / "ssl-bench"))


def results_dir() -> Path:
    return Path(os.environ.get("SSL_BENCH_RESULTS", REPO_ROOT / "results"))


def feature_cache_dir() -> Path:
    return home() / "features"


def checkpoint_cache_dir() -> Path:
    return home() / "checkpoints"


def default_zoo_dir() -> Path:
    """Published checkpoints imported into the harness format (`ssl-bench zoo import`)."""
    return checkpoint_cache_dir() / "zoo"
