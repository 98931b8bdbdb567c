"""The parity fixtures are the generator's bytes: each file's sha256 is in MANIFEST.json (a
swapped or edited fixture fails here and is refused by every reader), and each carries its
provenance (the official repository and commit, the blob ids of the official files run, the
command, the environment)."""
from __future__ import annotations

import json
import re
import shutil

import pytest

from benchmarks.finetune.reference import fixture_files
from benchmarks.finetune.reference.fixture_files import FIXTURES, checked, manifest, sha256

ROOT = FIXTURES.parents[2]
SHA1 = re.compile(r"^[0-9a-f]{40}$")


def test_every_fixture_file_is_in_the_manifest():
    listed = set(manifest()["sha256"])
    present = {p.name for p in FIXTURES.iterdir() if p.name != "MANIFEST.json"}
    assert listed == present


@pytest.mark.parametrize("name", sorted(manifest()["sha256"]))
def test_sha256_matches_the_manifest(name):
    assert sha256(FIXTURES / name) == manifest()["sha256"][name]


def test_a_swapped_fixture_is_refused(tmp_path, monkeypatch):
    copy = tmp_path / "fixtures"
    shutil.copytree(FIXTURES, copy)
    data = json.loads((copy / "ibot_schedules.json").read_text())
    data["cases"][0]["values"][3] *= 1.5
    (copy / "ibot_schedules.json").write_text(json.dumps(data, indent=1) + "\n")
    monkeypatch.setattr(fixture_files, "FIXTURES", copy)
    monkeypatch.setattr(fixture_files, "MANIFEST", copy / "MANIFEST.json")
    with pytest.raises(ValueError, match="sha256"):
        checked("ibot_schedules.json")
    checked("ibot_param_groups.json")  # the others still read


MADE_BY = manifest().get("made_by", {})  # fixtures of make_recipe_fixtures.py (several official checkouts)


@pytest.mark.parametrize("name", [n for n in sorted(manifest()["sha256"]) if n.endswith(".json") and n not in MADE_BY])
def test_provenance(name):
    prov = json.loads((FIXTURES / name).read_text())["provenance"]
    assert prov["repository"] == "https://github.com/bytedance/ibot"
    assert SHA1.match(prov["commit"]) and prov["commit"] == manifest()["official_commit"]
    generator = ROOT / prov["generator"]
    assert generator.is_file() and prov["generator"] == manifest()["generator"]
    assert prov["commit"] in prov["command"] and prov["generator"] in prov["command"]
    assert all(SHA1.match(b) for b in prov["official_files"].values())
    assert "evaluation/classification_layer_decay/engine_for_finetuning.py" in prov["official_files"]
    for key in ("python", "torch", "timm", "numpy", "platform", "date", "torch_threads"):
        assert key in prov["environment"], key
    assert prov["hyperparameters"]


@pytest.mark.parametrize("name", sorted(MADE_BY))
def test_provenance_of_the_recipe_fixtures(name):
    prov = json.loads((FIXTURES / name).read_text())["provenance"]
    made = MADE_BY[name]
    assert prov["generator"] == made["generator"] and (ROOT / prov["generator"]).is_file()
    assert prov["commits"] and all(prov["commits"][k] == made["commits"][k] for k in prov["commits"])
    for key, commit in prov["commits"].items():
        assert SHA1.match(commit) and commit in prov["command"] and prov["repositories"][key] in prov["command"]
    assert prov["official_files"] and all(SHA1.match(b) for b in prov["official_files"].values())
    assert prov["hyperparameters"] and {"torch", "timm"} <= set(prov["environment"])
