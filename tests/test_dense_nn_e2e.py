"""Dense NN end to end on SynthScenes 'small': a pretrained checkpoint beats random init
at every fraction. Needs a checkpoint: set SSL_BENCH_TEST_CKPT (a harness checkpoint of a
method pretrained on SynthScenes); skipped otherwise."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("preset", ["cribo", "hbird"])
def test_pretrained_beats_random_init_at_every_fraction(preset, tmp_path_factory):
    ckpt = os.environ.get("SSL_BENCH_TEST_CKPT")
    if not ckpt:
        pytest.skip("set SSL_BENCH_TEST_CKPT to a checkpoint pretrained on SynthScenes")
    from benchmarks.dense_nn import pretrained_vs_random
    from harness.data.synthetic import default_root, generate

    root = generate(default_root("small", 0), "small", 0, progress=False)
    values = {"dataset": "voc", "progress": False, "artifacts_dir": str(tmp_path_factory.mktemp("dn"))}
    if preset == "hbird":
        values["input_size"] = 64
    table = pretrained_vs_random(Path(ckpt), root, preset=preset, values=values)
    print(table.to_string())
    assert table["pretrained_beats_random"].all(), table.to_string()
