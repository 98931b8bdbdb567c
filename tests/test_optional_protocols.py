"""A suite's optional protocols (``requires``): found installed or missing without importing
the required packages (a cached run must not pay for mmcv's import)."""
from __future__ import annotations

import sys

import pytest

from harness.running.suite import ProtocolEntry, SuiteConfig, _importable, runnable_protocols


@pytest.fixture
def heavy_package(tmp_path, monkeypatch):
    """A package whose import fails loudly, with a compiled-looking submodule file."""
    pkg = tmp_path / "heavy_pkg_for_test"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("raise RuntimeError('the parent package was imported')\n")
    (pkg / "_ext.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield "heavy_pkg_for_test"
    sys.modules.pop("heavy_pkg_for_test", None)


def test_a_submodule_is_found_without_importing_its_package(heavy_package):
    assert _importable(f"{heavy_package}._ext")
    assert not _importable(f"{heavy_package}.missing")
    assert heavy_package not in sys.modules


def test_missing_or_non_package_parents_are_not_importable():
    assert not _importable("no_such_package_anywhere._ext")
    assert not _importable("json.decoder.nothing")  # json.decoder is a module, not a package
    assert _importable("json.decoder") and _importable("os.path")


def test_a_protocol_whose_requirement_is_missing_is_skipped_with_one_line(heavy_package):
    have = ProtocolEntry(name="knn", dataset="synth", requires=[f"{heavy_package}._ext"])
    lack = ProtocolEntry(name="seg_linear", dataset="synth_ade", requires=["no_such_package_anywhere._ext"])
    lines: list[str] = []
    kept = runnable_protocols(SuiteConfig(protocols=[have, lack]), log=lines.append)
    assert kept == [have]
    assert len(lines) == 1 and "seg_linear" in lines[0] and "no_such_package_anywhere._ext" in lines[0]
