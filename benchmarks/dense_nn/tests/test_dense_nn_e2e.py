"""Dense NN end to end on SynthScenes 'small': a pretrained checkpoint beats random init
at every fraction, with both presets.

The checkpoint is the shipped DINO checkpoint of the model zoo (``zoo:synth_dino``, DINO on
SynthScenes small, its weights checked by their sha256), so the test needs nothing from outside
the repository and no pretraining, and CI runs it with ``pytest -m slow``."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from harness.models.handle import ModelHandle

pytestmark = pytest.mark.slow


def pretrained_vs_random(pretrained: ModelHandle, data_root: Path, *, preset: str,
                         values: dict[str, Any], init_seed: int = 0):
    """The protocol on a pretrained model and on a random init of the same architecture: a
    pandas DataFrame, one row per fraction, with mean/std of both, their difference and whether
    the pretrained model beats random init."""
    import pandas as pd

    from benchmarks.dense_nn.protocol import DenseNN, summary

    bb = pretrained.backbone
    random_model = ModelHandle.random_init(bb.arch, seed=init_seed, **bb.arch_kwargs)
    rows = {}
    for tag, model in (("pretrained", pretrained), ("random", random_model)):
        df = summary(DenseNN.from_preset(preset, values).run(model, data_root))
        for _, r in df.iterrows():
            row = rows.setdefault(r["fraction"], {"fraction": r["fraction"]})
            row[f"{tag}_mean"], row[f"{tag}_std"] = r["mean"], r["std"]
    table = pd.DataFrame(list(rows.values()))
    table["delta"] = table["pretrained_mean"] - table["random_mean"]
    table["pretrained_beats_random"] = table["delta"] > 0
    return table


@pytest.mark.parametrize("preset", ["cribo", "hbird"])
def test_pretrained_beats_random_init_at_every_fraction(preset, tmp_path_factory):
    from harness.data.synthetic import default_root, generate
    from harness.models.sources import build_model

    root = generate(default_root("small", 0), "small", 0, progress=False)
    values = {"dataset": "voc", "progress": False, "artifacts_dir": str(tmp_path_factory.mktemp("dn"))}
    if preset == "hbird":
        values["input_size"] = 64
    table = pretrained_vs_random(build_model("zoo:synth_dino"), root, preset=preset, values=values)
    print(table.to_string())
    assert set(table["fraction"]) == {"1/128", "1/64", "1/8", "1/1"}, table.to_string()
    assert table["pretrained_beats_random"].all(), table.to_string()
