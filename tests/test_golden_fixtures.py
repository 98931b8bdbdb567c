"""The committed golden numbers (tests/fixtures/*.json, and a protocol folder's fixtures/ named here
by their path in the repository) are all present, each says how it
was produced, and each is read by the parity test named here. A deleted fixture fails this
test (and the parity tests that read it), never skips them: restore it from git, or
regenerate it with its generator in tests/reference/ from a checkout of the official code
(tests/reference/README.md; the generator is named in the fixture's provenance block)."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

TESTS = Path(__file__).parent
FIXTURES = TESTS / "fixtures"

# fixture -> the test modules that read it
READERS = {
    "cribo_parity.json": ["test_cribo.py"],
    "davis_parity.json": ["test_video_segmentation.py"],
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
    "lost_parity.json": ["test_lost.py"],
    "synclr_golden.json": ["test_synclr.py"],
    "tokencut_parity.json": ["test_lost.py"],
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
    "upernet_layer_decay.json": ["../benchmarks/upernet/tests/test_upernet.py"],
}


def generator_of(name: str) -> str:
    """The generator whose FIXTURE constant is ``name`` (tests/reference, or a protocol folder's reference/)."""
    scripts = [*(TESTS / "reference").glob("gen_*.py"), *TESTS.parent.glob("benchmarks/*/reference/gen_*.py")]
    for script in sorted(scripts):
        if re.search(rf'^FIXTURE = "{re.escape(Path(name).name)}"$', script.read_text(), re.M):
            return script.relative_to(TESTS.parent).as_posix()
    return "its generator tests/reference/gen_*.py"


@pytest.mark.parametrize("name", sorted(READERS))
def test_golden_fixture_is_present_says_how_and_is_read(name):
    path = FIXTURES / name if "/" not in name else TESTS.parent / name
    assert path.is_file(), (f"{path} is missing: restore it from git "
                            f"(git checkout -- {path.relative_to(TESTS.parent)}), or "
                            f"regenerate it with {generator_of(name)} from a checkout of the official code "
                            f"(tests/reference/README.md)")
    data = json.loads(path.read_text())
    assert isinstance(data.get("how"), str) and data["how"].strip(), f"{name}: no 'how' field"
    for module in READERS[name]:
        assert Path(name).name in (TESTS / module).read_text(), f"{module} no longer reads {name}: update READERS"


def test_no_unlisted_fixture():
    assert sorted(p.name for p in FIXTURES.glob("*.json")) == sorted(n for n in READERS if "/" not in n), (
        "tests/fixtures and READERS disagree: list each fixture with the test modules that read it")
