"""A suite runs every (model, protocol) pair it can: a failing pair is listed with its one
error line (model and protocol named) in the console, leaderboard.md, pairs.json and the exit
status; ``--fail-fast`` stops at the first; a protocol's setting is given on the command line as
``--set PROTOCOL.KEY=VALUE``."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from harness.cli import main
from harness.errors import ConfigError
from harness.running.suite import load_suite

KNN = {"name": "knn", "preset": "synth", "dataset": "imagefolder", "data_root": "{synth}/imagenet",
       "set": {"ks": [3], "progress": False}}
# vit_cpu_tiny's patches are 8 pixels: a crop of 60 is refused for it before any image is read
LINEAR = {"name": "linear", "preset": "synth", "dataset": "imagefolder", "data_root": "{synth}/imagenet",
          "set": {"crop": 60, "epochs": 2, "base_lrs": [0.1], "progress": False}}
MODEL = {"name": "vit", "random_init": {"arch": "vit_cpu_tiny", "seed": 0}}


def _suite(path: Path, synth_root: Path | None, protocols: list) -> Path:
    suite = {"models": [MODEL], "protocols": protocols}
    if synth_root is not None:
        suite["synth"] = {"preset": "tiny", "seed": 0, "root": str(synth_root)}
    path.write_text(yaml.safe_dump(suite))
    return path


def test_protocol_settings_on_the_command_line(tmp_path):
    path = _suite(tmp_path / "s.yaml", None, [KNN, LINEAR])
    suite, _ = load_suite(path, ["linear.crop=56", "device=cpu", "knn.ks=[5, 7]"])
    by_name = {p.name: p for p in suite.protocols}
    assert by_name["linear"].set == {**LINEAR["set"], "crop": 56}
    assert by_name["knn"].set["ks"] == [5, 7] and suite.device == "cpu"
    with pytest.raises(ConfigError, match=r"'crop' is neither a suite key .* nor a protocol .*robustness.crop=56"):
        load_suite(path, ["crop=56"])
    with pytest.raises(ConfigError, match="'segmenter'.*knn, linear"):
        load_suite(path, ["segmenter.crop_size=64"])


def _err_lines(capsys) -> tuple[str, list[str]]:
    captured = capsys.readouterr()
    return captured.out, [line for line in captured.err.splitlines() if line.strip()]


@pytest.mark.slow  # two runs of a one-model suite, leaderboard and report written (~10 s on 2 cores)
def test_a_failing_pair_keeps_the_run_going(isolated_home, synth_tiny, tmp_path, capsys):
    path = _suite(tmp_path / "s.yaml", synth_tiny, [LINEAR, KNN])
    results = isolated_home / "results"

    rc = main(["run", str(path), "--no-progress", "--fail-fast"])
    out, err = _err_lines(capsys)
    assert rc == 2 and len(err) == 1, err
    assert err[0].startswith("error: linear/synth on vit: linear: crop 60 is not a multiple of the stride 8")
    assert "--set linear.crop=N" in err[0] and "--fail-fast" in err[0]
    assert not list((results / "runs").rglob("*.json")) if (results / "runs").exists() else True  # knn never ran

    rc = main(["run", str(path), "--no-progress"])
    out, err = _err_lines(capsys)
    assert rc == 1
    assert "FAILED parts:\n  linear/synth on vit: linear: crop 60" in out
    pairs = json.loads((results / "pairs.json").read_text())
    assert [(p["protocol"], p["state"]) for p in pairs] == [("linear", "failed"), ("knn", "measured")]
    md = (results / "leaderboard.md").read_text()
    assert "## knn" in md and "## Pairs without a number" in md and "## Overview" in md
    overview = md.split("## Overview", 1)[1].split("\n## ", 1)[0]
    assert "| vit | " in overview and " failed | " in overview  # linear's cell says the pair failed
    assert "| vit | linear | synth | failed | linear: crop 60 is not a multiple" in md
    assert "Pairs without a number" in (results / "report.html").read_text()

    rc = main(["run", str(path), "--no-progress", "--set", "linear.crop=56"])
    out, _ = _err_lines(capsys)
    assert rc == 0, out
    pairs = json.loads((results / "pairs.json").read_text())
    assert [(p["protocol"], p["state"]) for p in pairs] == [("linear", "measured"), ("knn", "cached")]
    assert "## Pairs without a number" not in (results / "leaderboard.md").read_text()
