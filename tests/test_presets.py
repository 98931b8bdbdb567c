"""Protocol presets are data (<protocol folder>/presets/<protocol>_<preset>.yaml, or
configs/protocols/): every file loads into its protocol's PRESETS and builds a protocol whose
settings fingerprint."""
from __future__ import annotations


import pytest

from harness.errors import ConfigError
from harness.presets import load_presets, presets_folder
from harness.registry import PROTOCOLS

BUILT_IN = ("dense_nn", "knn", "linear", "seg_linear", "segmenter")


@pytest.mark.parametrize("name", BUILT_IN)
def test_every_preset_file_is_a_preset_that_builds(name):
    cls = PROTOCOLS.get(name)
    files = sorted(presets_folder(name).glob(f"{name}_*.yaml"))
    assert {f.stem for f in files} == {f"{name}_{p}" for p in cls.PRESETS}
    assert cls.DEFAULT_PRESET in cls.PRESETS
    fingerprints = set()
    for preset in cls.PRESETS:
        proto = cls.from_preset(preset)
        assert {k: getattr(proto.cfg, k) for k in cls.PRESETS[preset]} == cls.PRESETS[preset], preset
        fingerprints.add(proto.fingerprint())
    assert len(fingerprints) == len(cls.PRESETS)  # no two presets are the same settings


def test_hbird_synth_is_the_hbird_preset_at_64px():
    """The reference's values (std and metric included), only input_size 64 for SynthScenes'
    64 px images."""
    presets = PROTOCOLS.get("dense_nn").PRESETS
    assert presets["hbird_synth"] == {**presets["hbird"], "input_size": 64}


def test_preset_files_are_checked(tmp_path):
    (tmp_path / "p_a.yaml").write_text("protocol: p\npreset: a\nvalues: {x: 1, y: 2}\n")
    (tmp_path / "p_b.yaml").write_text("protocol: p\npreset: b\nextends: a\nvalues: {y: 3}\n")
    (tmp_path / "q_a.yaml").write_text("protocol: q\npreset: a\nvalues: {z: 0}\n")
    assert load_presets("p", tmp_path) == {"a": {"x": 1, "y": 2}, "b": {"x": 1, "y": 3}}
    (tmp_path / "p_c.yaml").write_text("protocol: p\npreset: c\nextends: missing\nvalues: {}\n")
    with pytest.raises(ConfigError, match="extends 'missing'"):
        load_presets("p", tmp_path)
    (tmp_path / "p_c.yaml").write_text("protocol: p\npreset: d\nvalues: {}\n")
    with pytest.raises(ConfigError, match="p_d.yaml"):
        load_presets("p", tmp_path)
    (tmp_path / "p_c.yaml").write_text("protocol: p\npreset: c\nsettings: {}\n")
    with pytest.raises(ConfigError, match="mapping 'values'"):
        load_presets("p", tmp_path)
