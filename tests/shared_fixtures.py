"""The fixtures every test tree shares: tests/conftest.py and benchmarks/conftest.py (the protocol
folders' tests/) both take them from here, so each is defined once."""
from __future__ import annotations

from pathlib import Path

import pytest


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
    the default suite caches its checkpoints. For the tests whose promise is that this preset
    learns; a test that needs any checkpoint which has learned takes the shipped
    ``zoo:synth_dino``, which costs no pretraining."""
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
