"""The model x protocol matrix (scripts/model_matrix.py) on a cheap subset, as CI runs it: models
that are not ssl-bench's own (a ResNet, a ViT with two prefix tokens, a transformers DINOv2 with
patch 14 and registers, a user-code CNN) on the protocols that read attention or keys (LOST,
robustness) and one that flags coarse grids (correspondence): every pair is measured, not
applicable with its reason, or refused with one line saying what to set; none fails."""
from __future__ import annotations

import pytest

MODELS = "resnet18,deit_tiny_distilled,hf_dinov2_reg14,user_cnn"
PROTOCOLS = "lost,robustness,correspondence"


@pytest.mark.slow  # ~21 s on 2 cores: 12 pairs on SynthScenes tiny
def test_the_matrix_subset_has_no_failed_pair(tmp_path, monkeypatch, capsys):
    pytest.importorskip("transformers")
    pytest.importorskip("open_clip")
    from scripts.model_matrix import cell_states, main

    monkeypatch.setenv("SSL_BENCH_HOME", str(tmp_path / "home"))
    assert main(["--out", str(tmp_path), "--models", MODELS, "--protocols", PROTOCOLS]) == 0
    table = capsys.readouterr().out
    assert table.startswith("| model | robustness | lost | correspondence |")  # the full suite's order
    cells = cell_states(tmp_path / "results")
    states = {k: v[0] for k, v in cells.items()}
    assert not [k for k, v in states.items() if v == "FAILED"], cells
    assert states[("deit_tiny_distilled", "lost")] == states[("deit_tiny_distilled", "robustness")] == "ok"
    assert states[("hf_dinov2_reg14", "lost")] == "ok"  # its keys read inside the transformers adapter
    assert states[("resnet18", "robustness")] == "n/a"  # occlusion alone: the other shifts measured
    assert "occlusion" in cells[("resnet18", "robustness")][1]
    assert states[("resnet18", "lost")] == states[("user_cnn", "lost")] == "n/a"
    assert states[("resnet18", "correspondence")] == "ok (flag)"  # stride 32: a 4 x 4 grid
    assert states[("hf_dinov2_reg14", "robustness")] == "refused"
    assert "--set robustness.crop=N" in cells[("hf_dinov2_reg14", "robustness")][1]
