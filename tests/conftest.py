import os
from pathlib import Path

# Same as the entry point: passive OpenMP waiting, set before torch is imported.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import pytest  # noqa: E402
import torch  # noqa: E402

# Tests are sized for 2 cores; more threads than cores only adds contention.
torch.set_num_threads(min(2, torch.get_num_threads()))


@pytest.fixture(scope="session")
def synth_tiny(tmp_path_factory) -> Path:
    """The 'tiny' SynthScenes preset, generated once per test session."""
    from harness.data.synthetic import generate

    return generate(tmp_path_factory.mktemp("synth") / "tiny", preset="tiny", seed=0, progress=False)


@pytest.fixture
def isolated_home(tmp_path, monkeypatch) -> Path:
    """Caches and result records under tmp_path, so tests never touch the user's."""
    monkeypatch.setenv("SSL_BENCH_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("SSL_BENCH_RESULTS", str(tmp_path / "results"))
    return tmp_path
