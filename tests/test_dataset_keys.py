"""One key per data set: a protocol reads ``KEY:LAYOUT`` (harness.data.catalogue) as that layout's
reader key, the name its fingerprint and records keep, so a record made under an old key (``nyu_probe3d``,
``voc07``, ...) stays the record of ``nyu:probe3d``, ``voc2007:boxes``, ...; an old key still works,
with one line; the shipped presets and suites name no old key."""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from harness.data.catalogue import catalogue
from harness.errors import ConfigError
from harness.protocol_info import build_protocol
from harness.registry import PROTOCOLS

REPO = Path(__file__).resolve().parent.parent
CASES = [("normals_dpt", "probe3d", "nyu:probe3d", "nyu_probe3d"),
         ("depth_dpt", "probe3d_navi", "navi:probe3d", "navi_probe3d"),
         ("lost", "synth", "voc2007:boxes", "voc07"),
         ("tokencut", "synth", "coco:coco20k", "coco20k"),
         ("dense_nn", "cribo", "voc:aug", "voc12aug")]


@pytest.mark.parametrize("name,preset,key,old", CASES)
def test_a_layout_key_is_recorded_as_its_old_key(name, preset, key, old, capsys):
    new, before = build_protocol(name, preset, {"dataset": key}), build_protocol(name, preset, {"dataset": old})
    assert new.cfg.dataset == old == before.cfg.dataset
    assert (new.fingerprint(), new.request_hash()) == (before.fingerprint(), before.request_hash())
    assert new.settings() == before.settings()
    build_protocol(name, preset, {"dataset": old})
    err = capsys.readouterr().err
    assert err.count(f"note: {old!r} is the") <= 1  # one line per old key and process
    assert f"note: {key!r}" not in err


def test_an_unknown_layout_is_refused():
    with pytest.raises(ConfigError, match="has no layout 'nope'"):
        build_protocol("normals_dpt", "probe3d", {"dataset": "nyu:nope"})


def _old_keys() -> set[str]:
    return {lay.reader for ds in catalogue().datasets.values() for lay in ds.layouts if lay.reader != ds.key}


def test_shipped_presets_name_no_old_key():
    old = _old_keys()
    assert {"nyu_probe3d", "navi_probe3d", "voc07", "voc12aug", "kitti_distance"} <= old
    for name in PROTOCOLS.names():
        cls = PROTOCOLS.get(name)
        default = getattr(cls.Config(), "dataset", None)
        assert default not in old, f"{name}'s Config names the old key {default!r}"
        for preset, values in cls.PRESETS.items():
            assert values.get("dataset") not in old, f"{name} preset {preset}: old key {values['dataset']!r}"


def test_shipped_suites_name_no_old_key():
    old = _old_keys()
    for path in sorted((REPO / "configs" / "suites").glob("*.yaml")):
        text = yaml.safe_load(path.read_text())
        entries = [e for e in (text or {}).get("protocols", []) if isinstance(e, dict)]
        found = {e.get("dataset") for e in entries} & old
        assert not found, f"{path.name} names old keys {sorted(found)}"


def test_the_data_check_hint_names_the_one_key():
    from harness.data.check import hint

    assert "data check nyu:probe3d --data-root R" in hint("nyu_probe3d", "R")
    assert "data check voc2007:classification --data-root" in hint("voc2007", "R")  # the transfer reader
    assert "data check voc2007:boxes --data-root" in hint("voc07", "R")
    assert "data check nyu --data-root" in hint("nyu", "R")
