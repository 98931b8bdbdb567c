"""The full SynthScenes suite (configs/suites/full.yaml): the default suite's models, protocols,
margins and table, then every other protocol that has a SynthScenes preset; on SynthScenes
tiny the protocols with their own SynthScenes sets run from the suite (slow)."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parent.parent
SUITES = REPO / "configs" / "suites"


def _suite(name: str) -> dict:
    return yaml.safe_load((SUITES / f"{name}.yaml").read_text())


def _protocols_with_a_synth_preset() -> set[str]:
    presets = list((REPO / "configs" / "protocols").glob("*_synth.yaml"))
    presets += list((REPO / "benchmarks").glob("*/presets/*_synth.yaml"))
    return {yaml.safe_load(p.read_text())["protocol"] for p in presets}


def test_full_is_the_default_suite_then_the_rest():
    default, full = _suite("default"), _suite("full")
    assert full["models"] == default["models"] and full["synth"] == default["synth"]
    assert full["protocols"][: len(default["protocols"])] == default["protocols"]
    assert (full["margins"], full["reproduce"]) == (default["margins"], default["reproduce"])


def test_every_protocol_with_a_synthscenes_preset_is_in_the_full_suite():
    in_full = {p["name"] for p in _suite("full")["protocols"]}
    assert _protocols_with_a_synth_preset() - in_full == set()
    assert all(p.get("preset") == "synth" for p in _suite("full")["protocols"][len(_suite("default")["protocols"]):])


@pytest.mark.slow
def test_the_full_suites_other_protocols_run_on_synthscenes_tiny(tmp_path):
    suite = _suite("full")
    suite["synth"] = {"preset": "tiny", "seed": 0}
    suite["models"] = [m for m in suite["models"] if m["name"] in ("chance", "pixels", "random_init_s0", "synth_dino")]
    # the protocols with their own SynthScenes sets ({synth:<protocol>}); Segmenter, logistic
    # regression and detection (a minute per model) run on SynthScenes in their own tests
    suite["protocols"] = [p for p in suite["protocols"]
                          if p["data_root"].startswith("{synth:") and p["name"] != "detection"]
    assert len(suite["protocols"]) == 14
    suite.pop("margins"), suite.pop("reproduce")
    path = tmp_path / "full_tiny.yaml"
    path.write_text(yaml.safe_dump(suite, sort_keys=False))
    env = {"SSL_BENCH_HOME": str(tmp_path / "home"), "SSL_BENCH_RESULTS": str(tmp_path / "results")}
    proc = subprocess.run([sys.executable, str(REPO / "run_benchmark.py"), "run", "--no-progress", str(path)],
                          cwd=tmp_path, capture_output=True, text=True, timeout=900,
                          env={**os.environ, **env})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    for p in suite["protocols"]:
        assert re.search(rf"\[{p['name']}/synth\] synth_dino: [1-9][0-9]* record\(s\)", proc.stdout), p["name"]
    written = sorted((tmp_path / "results" / "runs").rglob("*.json")) + [tmp_path / "results" / "pairs.json"]
    assert len(written) > len(suite["protocols"])
    for path in written:  # what JSON.parse, jq and databases accept: no NaN, no Infinity
        json.loads(path.read_text(), parse_constant=_refuse_constant)


def _refuse_constant(name: str):
    raise ValueError(f"{name} is not JSON")

