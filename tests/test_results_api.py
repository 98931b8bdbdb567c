"""harness.results.records.load_results: one typed row per number, every record field round-trips,
filters, the leaderboard pivot, old records without the newer fields; the docs' examples."""
from __future__ import annotations

import doctest
import json
from pathlib import Path

import pandas as pd
import pytest

from harness.results.leaderboard import build_leaderboard, pivot
from harness.results.records import RAW_PREFIX, TYPED_COLUMNS, load_results, to_records, write_record
from report_records import FP_DNN, all_records, suite_records

REPO = Path(__file__).resolve().parent.parent

OLD_RECORD = {  # written before weights keys, data roots, device types, artifacts and provenance
    "id": "old0000000000000000", "created": "2024-03-01T10:00:00+00:00",
    "model": {"name": "dino-old", "method": "dino", "arch": "vit_cpu_tiny", "checkpoint_sha256": "ab" * 32},
    "protocol": {"name": "knn", "dataset": "imagefolder", "split": "val", "params": {}, "fingerprint": "d4" * 8},
    "seed": None, "variant": {"k": 20}, "metrics": {"top1": 33, "per_class": [1.0, 2.0]},
    "cost": {"wall_s": 3},
}
RECORDS = all_records() + [OLD_RECORD]  # made once: each record's `created` is the time it was made


@pytest.fixture
def runs(tmp_path) -> Path:
    d = tmp_path / "runs"
    for r in RECORDS:
        write_record(r, d)
    (d / "notes.json").write_text(json.dumps({"not": "a record"}))  # foreign files are skipped
    return d


def _leaves(rec: dict) -> dict[str, object]:
    """Every field of a record by path, as load_results names its raw columns."""
    out = {}
    for k, v in rec.items():
        if isinstance(v, dict) and v:
            for k2, v2 in v.items():
                if k == "metrics" and isinstance(v2, (int, float)):
                    continue
                if (k, k2) == ("protocol", "params") and isinstance(v2, dict) and v2:
                    out.update({f"{RAW_PREFIX}{k}.{k2}.{k3}": v3 for k3, v3 in v2.items()})
                else:
                    out[f"{RAW_PREFIX}{k}.{k2}"] = v2
        else:
            out[f"{RAW_PREFIX}{k}"] = v
    return out


def test_every_record_field_round_trips(runs):
    records = {r["id"]: r for r in RECORDS}
    df = load_results(runs)
    back = {r["id"]: r for r in to_records(df)}
    assert back == records  # exactly: nulls stay null, absent fields stay absent, empty blocks stay empty
    for rid, rec in records.items():  # and each field is a column of the record's rows
        rows = df[df["record_id"] == rid]
        for path, value in _leaves(rec).items():
            assert all(v == value or (v is None and value is None) for v in rows[path]), (rid, path)
        numbers = {m: v for m, v in rec["metrics"].items() if isinstance(v, (int, float))}
        assert dict(zip(rows["metric"], rows["value"])) == pytest.approx(numbers)


def test_typed_columns_one_row_per_number(runs):
    df = load_results(runs)
    assert list(df.columns[:len(TYPED_COLUMNS)]) == TYPED_COLUMNS
    n_numbers = sum(sum(isinstance(v, (int, float)) for v in r["metrics"].values())
                    for r in RECORDS)
    assert len(df) == n_numbers
    dtypes = df.dtypes
    assert str(dtypes["model"]) == "string" and str(dtypes["seed"]) == "Int64" and str(dtypes["k"]) == "Int64"
    assert str(dtypes["fraction"]) == "Float64" and dtypes["value"] == "float64"
    assert str(dtypes["dirty"]) == "boolean" and str(dtypes["created"]).startswith("datetime64")
    assert str(dtypes["created"]).endswith("UTC]")
    dense = df[(df["protocol"] == "dense_nn") & (df["variant"] == "fraction=1/8")]
    assert set(dense["fraction"]) == {0.125} and set(dense["seed"]) == {42, 400, 783}
    assert set(dense["fingerprint"]) == {FP_DNN} and set(dense["device"]) == {"cpu"}
    assert (dense["wall_s"] == 1.25).all() and dense["git_commit"].notna().all()
    knn = df[(df["protocol"] == "knn") & (df["model"] == "dino")]
    assert set(knn["k"]) == {10, 20} and knn["seed"].isna().all() and knn["fraction"].isna().all()
    # an old record: the fields it lacks are <NA>, the ones it has are typed
    old = df[df["record_id"] == OLD_RECORD["id"]]
    assert list(old["metric"]) == ["top1"] and old["value"].iloc[0] == 33.0
    for col in ("weights_key", "data_root", "device", "device_type", "git_commit", "preset", "dirty"):
        assert old[col].isna().all(), col
    assert old["checkpoint_sha256"].iloc[0] == "ab" * 32
    assert old["created"].iloc[0] == pd.Timestamp("2024-03-01T10:00:00Z")


def test_filters_and_pivot(runs):
    assert set(load_results(runs, protocol="knn")["protocol"]) == {"knn"}
    assert set(load_results(runs, model=["dino", "ibot"])["model"]) == {"dino", "ibot"}
    by_fp = load_results(runs, fingerprint=FP_DNN[:8])  # the leaderboard's short fingerprint works
    assert set(by_fp["fingerprint"]) == {FP_DNN} and len(by_fp) == 3 * 3 * 3 * 2
    assert set(load_results(runs, metric="mIoU")["metric"]) == {"mIoU"}
    assert set(load_results(runs, dataset="voc")["dataset"]) == {"voc"}
    head = load_results(runs, headline=True)
    assert set(head.loc[head["protocol"] == "dense_nn", "metric"]) == {"mIoU"}
    assert set(head.loc[head["protocol"] == "knn", "metric"]) == {"top1"}
    assert load_results(runs, model="nobody").empty
    # the pivot is the leaderboard's table, from the frame or the records
    records = suite_records()
    table = pivot(load_results(records))
    assert table.equals(build_leaderboard(records).frame)
    col = ("dense_nn", "voc", "val", "fraction=1/8", "mIoU", FP_DNN)
    assert table.loc["dino", col + ("mean",)] == pytest.approx(20.5)
    assert table.loc["dino", col + ("n",)] == 3
    # filtered frames pivot to the filtered table
    assert list(pivot(load_results(records, protocol="knn")).columns.get_level_values("protocol").unique()) == ["knn"]


def test_empty_and_single_file(tmp_path):
    df = load_results(tmp_path)
    assert df.empty and list(df.columns) == TYPED_COLUMNS
    rec = suite_records()[0]
    path = write_record(rec, tmp_path)
    assert to_records(load_results(path)) == [rec]


def test_results_doc_examples(runs, monkeypatch):
    """docs/RESULTS.md's examples run against these records (SSL_BENCH_RESULTS/runs)."""
    monkeypatch.setenv("SSL_BENCH_RESULTS", str(runs.parent))
    monkeypatch.chdir(runs.parent)
    pd.set_option("display.width", 120)
    result = doctest.testfile(str(REPO / "docs" / "RESULTS.md"), module_relative=False, verbose=False,
                              optionflags=doctest.NORMALIZE_WHITESPACE | doctest.ELLIPSIS)
    pd.reset_option("display.width")
    assert result.attempted > 10 and result.failed == 0
