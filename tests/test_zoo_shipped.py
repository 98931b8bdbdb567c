"""The SynthScenes checkpoints shipped in configs/zoo/: each file is the one its zoo entry
names (size, sha256), its training log is the one on record, its recipe is the one the
retrain suite runs, and a changed byte stops a run with one clear error."""
import json
import shutil
from pathlib import Path

import pytest
import yaml

from harness.models import zoo as zoo_module
from harness.errors import CheckpointError, ConfigError
from harness.io_utils import sha256_file
from harness.models.zoo import SHIPPED_ZOO_DIR, load_zoo, verify_shipped, zoo_model

REPO = Path(__file__).resolve().parent.parent
ZOO_FILE = SHIPPED_ZOO_DIR / "synthscenes.yaml"
RECIPES = yaml.safe_load((SHIPPED_ZOO_DIR / "synthscenes_recipes.yaml").read_text())["recipes"]
SHIPPED = {n: e for n, e in load_zoo().items() if e.shipped}


def test_every_recipe_has_a_shipped_checkpoint_and_every_method_is_there():
    assert set(SHIPPED) == set(RECIPES)
    assert {e.method for e in SHIPPED.values()} == {"supervised", "dino", "ibot", "cribo", "synclr"}


@pytest.mark.parametrize("name", sorted(RECIPES))
def test_shipped_file_matches_its_entry(name):
    entry = SHIPPED[name]
    path = entry.shipped_path()
    assert path.stat().st_size == entry.size < 1_000_000
    assert sha256_file(path) == entry.sha256
    assert verify_shipped(entry) == path
    meta = json.loads(path.with_suffix(".json").read_text())
    assert meta["sha256"] == entry.sha256 and meta["method"] == entry.method and meta["arch"] == entry.arch


@pytest.mark.parametrize("name", sorted(RECIPES))
def test_provenance_says_how_to_regenerate_it(name):
    prov = SHIPPED[name].provenance
    for key in ("command", "recipe", "steps", "data", "code_commit", "device", "cpu", "torch", "wall_s", "log",
                "log_sha256"):
        assert prov.get(key) not in (None, ""), key
    assert prov["recipe"] == RECIPES[name]
    assert prov["command"].startswith("ssl-bench ")
    assert prov["steps"] >= 1200
    log = ZOO_FILE.parent / prov["log"]
    assert sha256_file(log) == prov["log_sha256"]
    rows = [json.loads(line) for line in log.read_text().splitlines()]
    assert rows[-1]["step"] == prov["steps"]
    assert all("loss" in r and "lr" in r for r in rows)


def test_retrain_suite_runs_the_recipes_on_record():
    suite = yaml.safe_load((REPO / "configs" / "suites" / "synthscenes_retrain.yaml").read_text())
    retrained = {m["name"].removesuffix("_retrained"): m for m in suite["models"] if m["name"].endswith("_retrained")}
    assert set(retrained) == set(RECIPES)
    for name, recipe in RECIPES.items():
        model = retrained[name]
        if "pretrain" in recipe:
            assert (model["pretrain"], model["set"]) == (recipe["pretrain"], recipe["set"])
        else:
            assert model["supervised"] == recipe["supervised"]
    default = yaml.safe_load((REPO / "configs" / "suites" / "default.yaml").read_text())
    assert suite["protocols"] == default["protocols"]  # shipped and retrained on the default protocols


@pytest.fixture
def copied_zoo(tmp_path, monkeypatch):
    """A copy of the shipped zoo that the loader reads instead of the real one."""
    home = tmp_path / "zoo"
    shutil.copytree(SHIPPED_ZOO_DIR, home)
    monkeypatch.setattr(zoo_module, "SHIPPED_ZOO_DIR", home)
    zoo_module._load.cache_clear()
    yield home
    zoo_module._load.cache_clear()


def test_one_changed_byte_stops_with_one_clear_error(copied_zoo):
    name = sorted(RECIPES)[0]
    path = copied_zoo / SHIPPED[name].file
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match=f"shipped checkpoint {name}: .* has sha256 .*its zoo entry"):
        zoo_model(name, copied_zoo)


def test_a_changed_byte_fails_the_default_run_with_exit_2(copied_zoo, tmp_path, monkeypatch, capsys):
    from harness.cli import main

    name = "synth_dino"
    path = copied_zoo / SHIPPED[name].file
    path.write_bytes(path.read_bytes()[:-1] + bytes([path.read_bytes()[-1] ^ 0xFF]))
    suite = tmp_path / "one.yaml"
    suite.write_text(yaml.safe_dump({"pretrain_data": "", "models": [{"name": name, "zoo": name}], "protocols": []}))
    monkeypatch.setenv("SSL_BENCH_RESULTS", str(tmp_path / "results"))
    assert main(["run", str(suite), "--no-progress"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"error: shipped checkpoint {name}")


def test_a_shipped_entry_without_hash_or_size_is_refused(tmp_path):
    bad = tmp_path / "z.yaml"
    bad.write_text(yaml.safe_dump({"checkpoints": [{
        "name": "x", "method": "dino", "arch": "vit_cpu_tiny", "patch_size": 8, "pretrain_data": "s",
        "layout": "harness", "file": "x.safetensors", "url": ""}]}))
    with pytest.raises(ConfigError, match="sha256 None .*size None"):
        load_zoo(bad)
