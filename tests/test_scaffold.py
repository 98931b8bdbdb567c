import importlib.util
import sys

import pytest

from harness.cli import main
from harness.conformance import check_method
from harness.errors import ConfigError
from harness.scaffold import new_method


def test_new_method_scaffold_passes_conformance(tmp_path, synth_tiny, isolated_home, capsys):
    assert main(["new-method", "toy_distill", "--root", str(tmp_path)]) == 0
    module_path = tmp_path / "methods" / "toy_distill.py"
    for p in (module_path, tmp_path / "configs/methods/toy_distill_cpu.yaml", tmp_path / "tests/test_method_toy_distill.py"):
        assert p.is_file()
    spec = importlib.util.spec_from_file_location("toy_distill_plugin", module_path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses look their module up there
    spec.loader.exec_module(mod)  # registers "toy_distill"
    try:
        report = check_method(tmp_path / "configs/methods/toy_distill_cpu.yaml", synth_tiny, protocols=False)
        assert report["losses"][-1] < report["losses"][0]
    finally:
        from harness.registry import METHODS

        METHODS._items.pop("toy_distill", None)
        sys.modules.pop(spec.name, None)


def test_new_method_refuses_bad_or_taken_names(tmp_path):
    with pytest.raises(ConfigError, match="lower-case Python identifier"):
        new_method("My-Method", tmp_path)
    with pytest.raises(ConfigError, match="already registered"):
        new_method("dino", tmp_path)
    new_method("fresh", tmp_path)
    with pytest.raises(ConfigError, match="would overwrite"):
        new_method("fresh", tmp_path)
