"""Dense NN end to end on SynthScenes 'small': a pretrained checkpoint beats random init
at every fraction, with both presets.

The checkpoint is the DINO CPU preset's full schedule on SynthScenes small (the shared,
session-scoped ``dino_cpu_checkpoint`` fixture of tests/conftest.py: pretrained once, about
6 minutes on 2 cores, cached under SSL_BENCH_HOME), so the test needs nothing from outside
the repository and CI runs it with ``pytest -m slow``."""
from __future__ import annotations

import pytest

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("preset", ["cribo", "hbird"])
def test_pretrained_beats_random_init_at_every_fraction(preset, dino_cpu_checkpoint, tmp_path_factory):
    from benchmarks.dense_nn import pretrained_vs_random
    from harness.data.synthetic import default_root, generate

    root = generate(default_root("small", 0), "small", 0, progress=False)
    values = {"dataset": "voc", "progress": False, "artifacts_dir": str(tmp_path_factory.mktemp("dn"))}
    if preset == "hbird":
        values["input_size"] = 64
    table = pretrained_vs_random(dino_cpu_checkpoint, root, preset=preset, values=values)
    print(table.to_string())
    assert set(table["fraction"]) == {"1/128", "1/64", "1/8", "1/1"}, table.to_string()
    assert table["pretrained_beats_random"].all(), table.to_string()
