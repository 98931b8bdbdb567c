"""The committed golden numbers (tests/fixtures/*.json, and a protocol folder's fixtures/*.json) are
all present, each says how it was produced, and each is read by a parity test: named here for
tests/fixtures, one of the folder's own tests/ for a folder's. A deleted fixture fails this test (and
the parity tests that read it), never skips them: restore it from git, or regenerate it with its
generator (tests/reference/ or the folder's reference/) from a checkout of the official code
(tests/reference/README.md; the generator is named in the fixture's provenance block)."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

TESTS = Path(__file__).parent
FIXTURES = TESTS / "fixtures"
REPO = TESTS.parent

# fixture -> the test modules that read it
READERS = {
    "cribo_parity.json": ["test_cribo.py"],
    "dino_head.json": ["test_methods_shared.py"],
    "dino_loss.json": ["test_dino.py", "test_methods_shared.py"],
    "dino_schedules.json": ["test_methods_shared.py"],
    "ibot_head.json": ["test_ibot.py"],
    "ibot_loss.json": ["test_ibot.py"],
    "ibot_masks.json": ["test_methods_shared.py"],
    "synclr_golden.json": ["test_synclr.py"],
    "probe3d_navi.json": ["test_dpt_probe.py"],
    "probe3d_dpt.json": ["test_dpt_probe.py", "../benchmarks/normals/tests/test_normals_dpt.py",
                         "../benchmarks/depth/tests/test_depth_dpt.py"],
    "official_split_readers.json": ["test_official_split_readers.py"],
}


def generator_of(name: str) -> str:
    """The tests/reference script whose FIXTURE constant is ``name``."""
    for script in sorted((TESTS / "reference").glob("gen_*.py")):
        if re.search(rf'^FIXTURE = "{re.escape(name)}"$', script.read_text(), re.M):
            return f"tests/reference/{script.name}"
    return "its generator tests/reference/gen_*.py"


@pytest.mark.parametrize("name", sorted(READERS))
def test_golden_fixture_is_present_says_how_and_is_read(name):
    path = FIXTURES / name
    assert path.is_file(), (f"{path} is missing: restore it from git (git checkout -- tests/fixtures/{name}), or "
                            f"regenerate it with {generator_of(name)} from a checkout of the official code "
                            f"(tests/reference/README.md)")
    data = json.loads(path.read_text())
    assert isinstance(data.get("how"), str) and data["how"].strip(), f"{name}: no 'how' field"
    for module in READERS[name]:
        assert name in (TESTS / module).read_text(), f"{module} no longer reads {name}: update READERS"


def test_no_unlisted_fixture():
    assert sorted(p.name for p in FIXTURES.glob("*.json")) == sorted(READERS), (
        "tests/fixtures and READERS disagree: list each fixture with the test modules that read it")


def folder_fixtures() -> list[Path]:
    """A protocol folder's golden fixtures: the one each generator of its reference/ writes (its
    FIXTURE constant, in the folder's fixtures/), so that a deleted fixture is still named."""
    found = []
    for script in sorted(REPO.glob("benchmarks/*/reference/gen_*.py")):
        m = re.search(r'^FIXTURE = "([^"]+)"$', script.read_text(), re.M)
        assert m, f"{script.relative_to(REPO)}: no FIXTURE constant"
        found.append(script.parents[1] / "fixtures" / m.group(1))
    return found


@pytest.mark.parametrize("path", folder_fixtures(), ids=lambda p: f"{p.parents[1].name}/{p.name}")
def test_folder_fixture_is_present_says_how_and_is_read_by_its_folders_tests(path):
    rel = path.relative_to(REPO)
    assert path.is_file(), (f"{rel} is missing: restore it from git (git checkout -- {rel}), or regenerate it with "
                            f"its generator in {rel.parent.parent}/reference/ (tests/reference/README.md)")
    data = json.loads(path.read_text())
    assert isinstance(data.get("how"), str) and data["how"].strip(), f"{rel}: no 'how' field"
    readers = [t for t in sorted((path.parents[1] / "tests").glob("test_*.py")) if path.name in t.read_text()]
    assert readers, f"no test in {rel.parent.parent}/tests/ reads {path.name}"


def test_no_folder_fixture_without_its_generator():
    """A folder with generators holds only the fixtures they write (another file is unaccounted for)."""
    written = set(folder_fixtures())
    folders = {p.parent for p in written}
    held = {p for folder in folders for p in folder.glob("*.json")}
    assert not held - written, f"fixtures no generator writes: {sorted(map(str, held - written))}"
