"""Records are strict JSON: a metric without a value is null with its reason, and the record
writer refuses NaN and Infinity anywhere, naming where they are."""
from __future__ import annotations

import json
import math

import pytest

from harness.results.records import defined_metrics, make_record, write_record


def _refuse(name: str):
    raise ValueError(f"{name} is not JSON")


def _record(metrics: dict, reasons: dict | None = None, params: dict | None = None) -> dict:
    model = {"name": "m", "weights_key": "0" * 64, "arch": "vit_cpu_tiny"}
    protocol = {"name": "correspondence_navi", "preset": "synth", "dataset": "navi", "split": "val",
                "params": params or {}, "fingerprint": "f" * 16}
    return make_record(model, protocol, 0, {}, metrics, {"wall_s": 1.0}, metrics_undefined=reasons)


def test_an_undefined_metric_is_null_with_its_reason(isolated_home):
    rec = _record({"recall_2cm": 41.5, "recall_2cm_90_120": float("nan"), "rmse": float("inf"), "x": None},
                  {"recall_2cm_90_120": "no pair of views is 90-120 degrees apart in this data (an empty bin)"})
    assert rec["metrics"] == {"recall_2cm": 41.5, "recall_2cm_90_120": None, "rmse": None, "x": None}
    assert rec["metrics_undefined"] == {
        "recall_2cm_90_120": "no pair of views is 90-120 degrees apart in this data (an empty bin)",
        "rmse": "not a finite number (inf)", "x": "not a finite number (None)"}
    path = write_record(rec, isolated_home / "runs")
    assert json.loads(path.read_text(), parse_constant=_refuse)["metrics"]["rmse"] is None
    assert "metrics_undefined" not in _record({"top1": 50.0})
    # a reason for a metric that has a value leaves the value alone
    assert defined_metrics({"a": 1.0}, {"a": "why"}) == ({"a": 1.0}, {})


def test_the_writer_refuses_nan_anywhere_and_says_where(isolated_home):
    rec = _record({"top1": 1.0}, params={"shifts": {"blur": [1.0, float("nan")]}})
    with pytest.raises(ValueError, match=r"protocol\.params\.shifts\.blur\[1\]"):
        write_record(rec, isolated_home / "runs")
    assert not list((isolated_home / "runs").glob("**/*.json"))  # nothing half-written


def test_old_records_with_nan_still_read(isolated_home):
    from harness.results.records import load_results

    runs = isolated_home / "runs"
    runs.mkdir()
    old = _record({"recall_2cm": 41.5, "recall_2cm_90_120": 1.0})
    text = json.dumps(old).replace('"recall_2cm_90_120": 1.0', '"recall_2cm_90_120": NaN')
    (runs / f"{old['id']}.json").write_text(text)
    frame = load_results(runs)
    values = dict(zip(frame["metric"], frame["value"]))
    assert values["recall_2cm"] == 41.5
    assert "recall_2cm_90_120" not in values or math.isnan(values["recall_2cm_90_120"])
