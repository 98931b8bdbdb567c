"""Every registered method passes the conformance suite (harness/conformance.py)."""
from pathlib import Path

import pytest

from harness.conformance import check_method
from harness.registry import METHODS, PROTOCOLS

REPO = Path(__file__).resolve().parent.parent


def _cpu_config(name: str) -> Path:
    path = REPO / "configs" / "methods" / f"{name}_cpu.yaml"
    if not path.is_file():
        pytest.fail(f"method {name!r} has no CPU preset at {path}")
    return path


@pytest.mark.parametrize("name", METHODS.names())
def test_method_conforms(name, synth_tiny, isolated_home, logreg_fits_in_one_child):
    report = check_method(_cpu_config(name), synth_tiny)
    assert report["losses"][-1] < report["losses"][0]
    assert set(report["protocols"]) == set(PROTOCOLS.names())  # every registered protocol, plugins too
    checked = {name for name, out in report["protocols"].items() if "skipped" not in out}
    assert {"knn", "linear", "dense_nn", "seg_linear", "segmenter"} <= checked
