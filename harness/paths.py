"""Where shipped and generated things live. Every generated location is overridable by an
environment variable."""
from __future__ import annotations

import os
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent
# The folder that holds the harness package: the repository in a checkout (an editable
# install), site-packages in an installed wheel.
REPO_ROOT = PACKAGE_DIR.parent
# The repository folders whose files ship with the package. A wheel carries each inside the
# package under the same path (pyproject.toml maps them; tests/test_packaging.py checks that
# every file is listed), so that nothing depends on where the checkout was.
SHIPPED_FOLDERS = ("configs", "results/paper")
PACKAGED_DATA = PACKAGE_DIR / "_shipped"


def shipped(path: str) -> Path:
    """A file or folder that ships with ssl-bench, by its path in the repository
    (``shipped("configs/zoo.yaml")``, ``shipped("results/paper")``): inside the installed
    package, else (a checkout) in the repository beside the package."""
    if not any(path == f or path.startswith(f + "/") for f in SHIPPED_FOLDERS):
        raise ValueError(f"{path!r} is not under a shipped folder ({', '.join(SHIPPED_FOLDERS)})")
    return (PACKAGED_DATA if PACKAGED_DATA.is_dir() else REPO_ROOT) / path


def source_checkout() -> Path | None:
    """The repository the harness runs from, or None when it is an installed package."""
    return REPO_ROOT if (REPO_ROOT / "pyproject.toml").is_file() and not PACKAGED_DATA.is_dir() else None


def home() -> Path:
    """Cache root for generated data, pretrained checkpoints and feature caches."""
    return Path(os.environ.get("SSL_BENCH_HOME", Path.home() / ".cache" / "ssl-bench"))


def results_dir() -> Path:
    """Result records, leaderboards and reports: the checkout's results/, or, for an installed
    package, results/ in the current directory (never inside site-packages)."""
    default = (source_checkout() or Path.cwd()) / "results"
    return Path(os.environ.get("SSL_BENCH_RESULTS", default))


def feature_cache_dir() -> Path:
    return home() / "features"


def checkpoint_cache_dir() -> Path:
    return home() / "checkpoints"


def model_memo_dir() -> Path:
    """The remembered identities of suite models (harness.running.model_memo)."""
    return home() / "model_memo"


def default_zoo_dir() -> Path:
    """Published checkpoints imported into the harness format (`ssl-bench zoo import`)."""
    return checkpoint_cache_dir() / "zoo"
