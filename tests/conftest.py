import os
import sys
from pathlib import Path

# Same as the entry point: passive OpenMP waiting, set before torch is imported.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import pytest  # noqa: E402
import torch  # noqa: E402

# Tests are sized for 2 cores; more threads than cores only adds contention. Under
# pytest-xdist each worker process holds one core.
_THREADS = 1 if os.environ.get("PYTEST_XDIST_WORKER") else 2
torch.set_num_threads(min(_THREADS, torch.get_num_threads()))

# The shared test support modules (model_zoo_fixtures.py, image_folders.py, ...) import by their own
# names from the protocol folders' tests too (benchmarks/conftest.py runs this file), as pytest
# makes them importable for the tests beside them.
_SUPPORT = str(Path(__file__).resolve().parent)
if _SUPPORT not in sys.path:
    sys.path.append(_SUPPORT)


def pytest_collection_modifyitems(config, items):
    """Under pytest-xdist (``--dist loadgroup``), the tests that share the session's pretrained
    DINO checkpoint run on one worker: a second worker would find the pretraining folder locked.
    A fast test file runs on one worker, so that its module fixtures are made once; the slow
    tests, minutes each, are spread one by one."""
    for item in items:
        if "dino_cpu_checkpoint" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.xdist_group("dino_cpu_checkpoint"))
        elif item.get_closest_marker("slow") is None and item.get_closest_marker("xdist_group") is None:
            item.add_marker(pytest.mark.xdist_group(item.nodeid.split("::")[0]))


@pytest.fixture(scope="session")
def synth_tiny(tmp_path_factory) -> Path:
    """The 'tiny' SynthScenes preset, generated once per test session."""
    from harness.data.synthetic import generate

    return generate(tmp_path_factory.mktemp("synth") / "tiny", preset="tiny", seed=0, progress=False)


@pytest.fixture
def one_torch_thread():
    """The tiny ViT runs fastest on one thread; on a loaded 2-core machine two threads spin. A module
    takes it with ``pytestmark = pytest.mark.usefixtures("one_torch_thread")``."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture
def isolated_home(tmp_path, monkeypatch) -> Path:
    """Caches and result records under tmp_path, so tests never touch the user's."""
    monkeypatch.setenv("SSL_BENCH_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("SSL_BENCH_RESULTS", str(tmp_path / "results"))
    return tmp_path


@pytest.fixture(scope="session")
def dino_cpu_checkpoint() -> Path:
    """The DINO CPU preset's full schedule (408 steps of 64, about 6 minutes on 2 cores) on
    SynthScenes small: pretrained once and cached by configuration under SSL_BENCH_HOME, as
    the default suite caches its checkpoints, so every slow test that needs a checkpoint
    which has learned shares this one."""
    from harness.data.synthetic import default_root, generate
    from harness.running.suite import ModelEntry, pretrained_checkpoint

    root = generate(default_root("small", 0), preset="small", seed=0, progress=False)
    entry = ModelEntry(name="dino-cpu", pretrain="methods/dino_cpu.yaml", set=["train.num_workers=1"])
    return pretrained_checkpoint(entry, root, "synthscenes-small", progress=False)


@pytest.fixture
def one_rank_group(tmp_path):
    """A one-process gloo group: DDP and collective code paths without a second process."""
    import torch.distributed as tdist

    tdist.init_process_group("gloo", init_method=f"file://{tmp_path / 'rdzv'}", rank=0, world_size=1)
    yield
    tdist.destroy_process_group()
