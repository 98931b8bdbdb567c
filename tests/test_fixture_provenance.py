"""Every committed fixture says where its numbers come from and can be made again: a
provenance block with the official repository, its full commit, the settings, the
environment, and a generator script in tests/reference/ (tests/reference/README.md) or in the
reference/ folder of the protocol folder whose fixtures/ holds it."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

TESTS = Path(__file__).parent
ROOT = TESTS.parent
# the generators: tests/reference/gen_*.py and a protocol folder's reference/gen_*.py (its fixtures/ beside it)
GENERATORS = sorted([*(TESTS / "reference").glob("gen_*.py"), *ROOT.glob("benchmarks/*/reference/gen_*.py")])
GENERATOR_PATH = re.compile(r"^(tests/reference|benchmarks/[a-z0-9_]+/reference)/gen_[A-Za-z0-9_]+\.py$")


def fixture_folder(generator: Path) -> Path:
    """Where a generator's fixture lives: tests/fixtures, or its protocol folder's fixtures/."""
    return TESTS / "fixtures" if generator.parent == TESTS / "reference" else generator.parent.parent / "fixtures"


def _written_by_a_generator() -> list[Path]:
    """The fixtures of protocol folders that a generator writes (a folder's other fixtures carry a manifest)."""
    out = []
    for script in GENERATORS:
        m = re.search(r'^FIXTURE = "([^"]+)"$', script.read_text(), re.M)
        if m and fixture_folder(script) != TESTS / "fixtures":
            out.append(fixture_folder(script) / m.group(1))
    return out


FIXTURES = sorted([*(TESTS / "fixtures").glob("*.json"), *_written_by_a_generator()])
SHA1 = re.compile(r"^[0-9a-f]{40}$")


def test_there_are_fixtures():
    assert FIXTURES, "no tests/fixtures/*.json found"


@pytest.mark.parametrize("path", FIXTURES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_fixture_has_provenance_and_a_generator(path):
    data = json.loads(path.read_text())
    prov = data.get("provenance")
    assert isinstance(prov, dict), (
        f"{path.name}: no 'provenance' block; regenerate it with its tests/reference generator")
    assert SHA1.match(prov.get("commit",
                               "")), f"{path.name}: provenance.commit {prov.get('commit')!r} is not a 40-char commit"
    assert prov.get("repository", "").startswith("https://github.com/"), f"{path.name}: provenance.repository"
    gen = prov.get("generator", "")
    assert GENERATOR_PATH.match(gen), f"{path.name}: provenance.generator {gen!r}"
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
    for script in GENERATORS:
        m = re.search(r'^FIXTURE = "([^"]+)"$', script.read_text(), re.M)
        assert m, f"{script.name}: no FIXTURE constant"
        where = fixture_folder(script) / m.group(1)
        assert where.is_file(), f"{script.name}: {where.relative_to(ROOT)} missing"


# The official-class parity fixtures (tests/fixtures/official/<case>/: checkpoint.pth,
# reference.pt and provenance.json, written by scripts/official_parity/generate_fixtures.py
# from checkouts of the official repositories; read by tests/test_official_parity.py).
OFFICIAL = TESTS / "fixtures" / "official"
OFFICIAL_CASES = sorted(p for p in OFFICIAL.iterdir() if p.is_dir()) if OFFICIAL.is_dir() else []


@pytest.mark.parametrize("case", OFFICIAL_CASES, ids=lambda p: p.name)
def test_official_fixture_has_provenance_and_a_generator(case):
    import hashlib

    prov_path = case / "provenance.json"
    assert prov_path.is_file(), (
        f"{case.name}: no provenance.json; regenerate with scripts/official_parity/generate_fixtures.py")
    prov = json.loads(prov_path.read_text())
    assert prov.get("case") == case.name, f"{case.name}: provenance.case {prov.get('case')!r}"
    assert re.match(r"^[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+$", prov.get("repo", "")), f"{case.name}: provenance.repo"
    assert prov.get("url") == f"https://github.com/{prov['repo']}", (
        f"{case.name}: provenance.url")
    assert SHA1.match(prov.get("commit",
                               "")), f"{case.name}: provenance.commit {prov.get('commit')!r} is not a 40-char commit"
    gen = prov.get("generator", "")
    assert gen.startswith("scripts/official_parity/") and (ROOT / gen).is_file(), f"{case.name}: generator {gen!r}"
    for name in ("checkpoint.pth", "reference.pt"):
        assert (case / name).is_file(), (
            f"{case.name}: {name} missing")
    digest = hashlib.sha256((case / "checkpoint.pth").read_bytes()).hexdigest()
    assert prov.get("checkpoint_sha256") == digest, (
        f"{case.name}: checkpoint.pth is not the file provenance.json describes")
    env = prov.get("environment", {})
    for key in ("python", "torch", "numpy", "platform"):
        assert key in env, f"{case.name}: provenance.environment lacks {key!r}"


def test_official_real_size_checks_name_their_generator_and_commits():
    path = OFFICIAL / "real_size_checks.json"
    if not OFFICIAL_CASES and not path.exists():
        pytest.skip("no official parity fixtures")
    data = json.loads(path.read_text())
    script = data.get("generator", "").split()[0] if data.get("generator") else ""
    assert script.startswith("scripts/official_parity/") and (ROOT / script).is_file(), (
        f"generator {data.get('generator')!r}")
    assert data.get("commits") and all(SHA1.match(c) for c in data["commits"].values()), "commits"
    assert "torch" in data.get("environment", {}), "environment"
