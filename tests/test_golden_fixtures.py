"""The committed golden numbers (tests/fixtures/*.json) are all present, each says how it
was produced, and each is read by the parity test named here. A deleted fixture fails this
test (and the parity tests that read it), never skips them: none of these files can be
regenerated from this repository (no generator scripts are committed; each was produced
once by running the official code outside it, as its "how" field describes)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

TESTS = Path(__file__).parent
FIXTURES = TESTS / "fixtures"

# fixture -> the test modules that read it
READERS = {
    "cribo_parity.json": ["test_cribo.py"],
    "dino_head.json": ["test_methods_shared.py"],
    "dino_loss.json": ["test_dino.py", "test_methods_shared.py"],
    "dino_schedules.json": ["test_methods_shared.py"],
    "hbird_golden.json": ["test_dense_nn_golden.py"],
    "ibot_head.json": ["test_ibot.py"],
    "ibot_loss.json": ["test_ibot.py"],
    "ibot_masks.json": ["test_methods_shared.py"],
    "knn_dino_golden.json": ["test_knn.py"],
    "synclr_golden.json": ["test_synclr.py"],
}


@pytest.mark.parametrize("name", sorted(READERS))
def test_golden_fixture_is_present_says_how_and_is_read(name):
    path = FIXTURES / name
    assert path.is_file(), f"{path} is missing: restore it from git (it cannot be regenerated from this repository)"
    data = json.loads(path.read_text())
    assert isinstance(data.get("how"), str) and data["how"].strip(), f"{name}: no 'how' field"
    for module in READERS[name]:
        assert name in (TESTS / module).read_text(), f"{module} no longer reads {name}: update READERS"


def test_no_unlisted_fixture():
    assert sorted(p.name for p in FIXTURES.glob("*.json")) == sorted(READERS)
