"""The committed golden numbers (tests/fixtures/*.json, and a protocol folder's fixtures/*.json)
are all present, each says how it was produced, and each is read by the parity test named here. A
deleted fixture fails this test (and the parity tests that read it), never skips them: restore it
from git, or regenerate it with its generator (tests/reference/ or the folder's reference/) from a
checkout of the official code (tests/reference/README.md; the generator is named in the fixture's
provenance block)."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

TESTS = Path(__file__).parent
REPO = TESTS.parent
FIXTURES = TESTS / "fixtures"
# a protocol folder's fixtures/ that keeps its own sha256 manifest (benchmarks/finetune) is checked there
FOLDER_FIXTURES = "benchmarks/*/fixtures"
MANIFEST = "MANIFEST.json"

# fixture (a name in tests/fixtures, or a path in a protocol folder) -> the test modules that read it
READERS = {
    "cribo_parity.json": ["test_cribo.py"],
    "benchmarks/davis/fixtures/davis_parity.json": ["../benchmarks/davis/tests/test_davis.py"],
    "dino_head.json": ["test_methods_shared.py"],
    "dino_loss.json": ["test_dino.py", "test_methods_shared.py"],
    "dino_schedules.json": ["test_methods_shared.py"],
    "hbird_e2e.json": ["test_dense_nn_hbird_e2e.py"],
    "hbird_golden.json": ["test_dense_nn_golden.py"],
    "ibot_head.json": ["test_ibot.py"],
    "ibot_loss.json": ["test_ibot.py"],
    "ibot_masks.json": ["test_methods_shared.py"],
    "knn_dino_golden.json": ["test_knn.py"],
    "linear_dino_parity.json": ["test_linear_probe_dino_parity.py"],
    "logreg_cyanure022.json": ["test_logreg.py"],
    "benchmarks/discovery/fixtures/lost_parity.json": ["../benchmarks/discovery/tests/test_lost.py"],
    "synclr_golden.json": ["test_synclr.py"],
    "benchmarks/discovery/fixtures/tokencut_parity.json": ["../benchmarks/discovery/tests/test_lost.py"],
    "unsup_cls_eval_pred.json": ["test_unsup_cls.py"],
    "benchmarks/correspondence/fixtures/correspondence_probe3d.json":
        ["../benchmarks/correspondence/tests/test_correspondence.py"],
    "benchmarks/correspondence/fixtures/correspondence_navi_probe3d.json":
        ["../benchmarks/correspondence/tests/test_correspondence_navi.py"],
    "benchmarks/depth/fixtures/depth_linear4.json": ["../benchmarks/depth/tests/test_depth_presets.py"],
    "probe3d_navi.json": ["test_dpt_probe.py"],
    "probe3d_dpt.json": ["test_dpt_probe.py", "../benchmarks/normals/tests/test_normals_dpt.py",
                             "../benchmarks/depth/tests/test_depth_dpt.py"],
    "robustness_in9.json": ["test_robustness.py"],
    "robustness_mce_alexnet.json": ["test_robustness.py"],
    "robustness_mce_ibot.json": ["test_robustness.py"],
    "robustness_patch_drop.json": ["test_robustness.py"],
    "official_split_readers.json": ["test_official_split_readers.py"],
    "transfer_synclr.json": ["test_transfer.py"],
    "benchmarks/upernet/fixtures/upernet_layer_decay.json": ["../benchmarks/upernet/tests/test_upernet.py"],
}


def fixture_path(name: str) -> Path:
    return REPO / name if "/" in name else FIXTURES / name


def generator_of(name: str) -> str:
    """The reference script (tests/reference/ or a folder's reference/) whose FIXTURE constant is ``name``."""
    scripts = sorted((TESTS / "reference").glob("gen_*.py")) + sorted(REPO.glob("benchmarks/*/reference/gen_*.py"))
    for script in scripts:
        if re.search(rf'^FIXTURE = "{re.escape(Path(name).name)}"$', script.read_text(), re.M):
            return script.relative_to(REPO).as_posix()
    return "its generator tests/reference/gen_*.py"


@pytest.mark.parametrize("name", sorted(READERS))
def test_golden_fixture_is_present_says_how_and_is_read(name):
    path = fixture_path(name)
    assert path.is_file(), (f"{path} is missing: restore it from git (git checkout -- "
                            f"{path.relative_to(REPO).as_posix()}), or "
                            f"regenerate it with {generator_of(name)} from a checkout of the official code "
                            f"(tests/reference/README.md)")
    data = json.loads(path.read_text())
    assert isinstance(data.get("how"), str) and data["how"].strip(), f"{name}: no 'how' field"
    for module in READERS[name]:
        assert Path(name).name in (TESTS / module).read_text(), f"{module} no longer reads {name}: update READERS"


def test_no_unlisted_fixture():
    found = [p.name for p in FIXTURES.glob("*.json")]
    found += [p.relative_to(REPO).as_posix() for p in REPO.glob(f"{FOLDER_FIXTURES}/*.json")
              if not (p.parent / MANIFEST).is_file()]
    assert sorted(found) == sorted(READERS), (
        "tests/fixtures and READERS disagree: list each fixture with the test modules that read it")
