"""The fast YAML reader gives what yaml.safe_load gives, on every YAML file the project ships."""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from harness.presets import load_presets
from harness.yaml_io import SAFE_LOADER, load_yaml

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = sorted(p for d in ("configs", "methods") for p in (ROOT / d).rglob("*.y*ml"))


def test_every_shipped_yaml_file_reads_the_same_with_both_parsers():
    assert len(SHIPPED) > 20
    for path in SHIPPED:
        text = path.read_text()
        assert load_yaml(text) == yaml.safe_load(text), path


def test_load_yaml_is_safe_and_raises_yaml_errors():
    with pytest.raises(yaml.YAMLError):
        load_yaml("a: [1, 2\nb: 3")
    with pytest.raises(yaml.YAMLError):  # no arbitrary Python objects from a config file
        load_yaml("!!python/object/apply:os.system ['true']")
    assert issubclass(SAFE_LOADER, (yaml.SafeLoader, getattr(yaml, "CSafeLoader", yaml.SafeLoader)))


def test_presets_are_read_again_when_a_file_changes(tmp_path):
    path = tmp_path / "knn_x.yaml"
    path.write_text("protocol: knn\npreset: x\nvalues: {k: 1}\n")
    assert load_presets("knn", tmp_path) == {"x": {"k": 1}}
    first = load_presets("knn", tmp_path)
    first["x"]["k"] = 99  # a caller's change does not leak into the next read
    assert load_presets("knn", tmp_path) == {"x": {"k": 1}}
    path.write_text("protocol: knn\npreset: x\nvalues: {k: 2, m: 3}\n")  # another size: read again
    assert load_presets("knn", tmp_path) == {"x": {"k": 2, "m": 3}}
    (tmp_path / "knn_y.yaml").write_text("protocol: knn\npreset: y\nextends: x\nvalues: {m: 4}\n")
    assert load_presets("knn", tmp_path)["y"] == {"k": 2, "m": 4}
