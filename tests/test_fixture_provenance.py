"""Every committed fixture says where its numbers come from and can be made again: a
provenance block with the official repository, its full commit, the settings, the
environment, and a generator script in tests/reference/ (tests/reference/README.md)."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

TESTS = Path(__file__).parent
ROOT = TESTS.parent
FIXTURES = sorted((TESTS / "fixtures").glob("*.json"))
SHA1 = re.compile(r"^[0-9a-f]{40}$")


def test_there_are_fixtures():
    assert FIXTURES, "no tests/fixtures/*.json found"


@pytest.mark.parametrize("path", FIXTURES, ids=lambda p: p.name)
def test_fixture_has_provenance_and_a_generator(path):
    data = json.loads(path.read_text())
    prov = data.get("provenance")
    assert isinstance(prov, dict), f"{path.name}: no 'provenance' block; regenerate it with its tests/reference generator"
    assert SHA1.match(prov.get("commit", "")), f"{path.name}: provenance.commit {prov.get('commit')!r} is not a 40-char commit"
    assert prov.get("repository", "").startswith("https://github.com/"), f"{path.name}: provenance.repository"
    gen = prov.get("generator", "")
    assert gen.startswith("tests/reference/gen_") and gen.endswith(".py"), f"{path.name}: provenance.generator {gen!r}"
    script = ROOT / gen
    assert script.is_file(), f"{path.name}: generator {gen} does not exist"
    # the generator names this fixture and this commit (what its --help shows)
    source = script.read_text()
    assert re.search(rf'^FIXTURE = "{re.escape(path.name)}"$', source, re.M), f"{gen} does not write {path.name}"
    assert re.search(rf'^COMMIT = "{prov["commit"]}"$', source, re.M), f"{gen}: COMMIT is not {prov['commit']}"
    assert prov.get("hyperparameters"), f"{path.name}: provenance.hyperparameters is empty"
    files = prov.get("official_files")
    assert files and all(SHA1.match(b) for b in files.values()), f"{path.name}: provenance.official_files"
    env = prov.get("environment", {})
    for key in ("python", "torch", "numpy", "platform", "date", "torch_threads"):
        assert key in env, f"{path.name}: provenance.environment lacks {key!r}"


def test_every_generator_has_its_fixture():
    for script in sorted((TESTS / "reference").glob("gen_*.py")):
        m = re.search(r'^FIXTURE = "([^"]+)"$', script.read_text(), re.M)
        assert m, f"{script.name}: no FIXTURE constant"
        assert (TESTS / "fixtures" / m.group(1)).is_file(), f"{script.name}: tests/fixtures/{m.group(1)} missing"
