"""The records index (harness.results.index): it agrees with the JSON files after concurrent
writers in several processes, a writer that never reached it, a deleted file, a file corrupted
in place and a damaged index file; an unreadable file is named in one line and the rest served."""
from __future__ import annotations

import json
import multiprocessing
import os
import sqlite3
from pathlib import Path

import pytest

from harness.io_utils import atomic_write_json
from harness.results import index as records_index
from harness.results.records import find_records, iter_records, write_record

WRITERS = 4


def tiny_record(i: int) -> dict:
    return {"id": f"r{i:06d}", "model": {"name": f"model{i % 50}"},
            "protocol": {"name": "knn" if i % 2 else "dense_nn", "fingerprint": "f" * 16},
            "seed": i % 3, "variant": {}, "metrics": {"top1": float(i)}}


def _write_share(folder: str, start: int, stop: int) -> None:
    """One writer process: its share of the records, reading the folder now and then as a
    suite's skip-if-done does."""
    for i in range(start, stop):
        write_record(tiny_record(i), Path(folder))
        if i % 250 == 0:
            find_records(Path(folder), protocol="knn", fingerprint="f" * 16, model=f"model{i % 50}")


def _context():
    # fork is quick; where there is none (macOS / Windows defaults) spawn does the same work
    return multiprocessing.get_context("fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn")


def _files(folder: Path) -> dict[str, dict]:
    return {p.stem: json.loads(p.read_text()) for p in folder.glob("*.json")}


def _served(folder: Path) -> dict[str, dict]:
    return {r["id"]: r for r in iter_records(folder)}


def _write_concurrently(folder: Path, n: int) -> None:
    ctx = _context()
    bounds = [n * w // WRITERS for w in range(WRITERS + 1)]
    procs = [ctx.Process(target=_write_share, args=(str(folder), a, b)) for a, b in zip(bounds, bounds[1:])]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=600)
        assert p.exitcode == 0


def _check_index_agrees(folder: Path, n: int, capfd) -> None:
    folder.mkdir()
    list(iter_records(folder))  # an index exists before the writers start
    _write_concurrently(folder, n)
    # a writer that never reached the index (another version, another machine's process)
    atomic_write_json(folder / "outside.json", {**tiny_record(n), "id": "outside"})
    files = _files(folder)
    assert len(files) == n + 1
    assert _served(folder) == files
    one = find_records(folder, protocol="knn", fingerprint="f" * 16, model="model7")
    assert sorted(r["id"] for r in one) == sorted(k for k, r in files.items()
                                                  if r["model"]["name"] == "model7" and r["protocol"]["name"] == "knn")
    # a deleted file and one corrupted in place (its folder's mtime unchanged)
    capfd.readouterr()
    (folder / "r000003.json").unlink()
    (folder / "r000004.json").write_text('{"id": "r000004", "model": ')
    served = _served(folder)
    assert set(served) == set(files) - {"r000003", "r000004"}
    err = capfd.readouterr().err.splitlines()
    assert [ln for ln in err if "r000004.json" in ln] == [ln for ln in err if "r000004" in ln] != []
    assert len([ln for ln in err if "r000004.json" in ln]) == 1
    assert len([ln for ln in err if "r000003.json" in ln]) == 1
    list(iter_records(folder))
    assert "r000004" not in capfd.readouterr().err  # named once per process
    # the lookup of one pair never serves a record whose file is gone
    (folder / "r000007.json").unlink()
    assert "r000007" not in {r["id"] for r in find_records(folder, protocol="knn", fingerprint="f" * 16,
                                                             model="model7")}


def test_index_agrees_with_files_after_concurrent_writers_deletion_and_corruption(tmp_path, capfd):
    _check_index_agrees(tmp_path / "runs", 1000, capfd)


@pytest.mark.slow
def test_index_agrees_with_ten_thousand_records(tmp_path, capfd):
    _check_index_agrees(tmp_path / "runs", 10_000, capfd)


def test_a_damaged_or_missing_index_is_rebuilt_from_the_files(tmp_path):
    folder = tmp_path / "runs"
    for i in range(20):
        write_record(tiny_record(i), folder)
    db = folder / records_index.INDEX_DIR / records_index.INDEX_FILE
    assert db.is_file()
    records_index.index_of(folder).close()
    db.write_bytes(b"not a database" * 100)
    assert len(_served(folder)) == 20
    records_index.index_of(folder).close()
    db.unlink()
    assert len(_served(folder)) == 20 and db.is_file()
    with sqlite3.connect(db) as con:  # rows come back with their file's text
        assert con.execute("SELECT COUNT(*) FROM files WHERE status = 'record'").fetchone()[0] == 20


def test_an_unwritable_folder_is_served_from_an_index_in_memory(tmp_path):
    folder = tmp_path / "runs"
    for i in range(5):
        write_record(tiny_record(i), folder)
    index = records_index.RecordIndex(folder)
    index.path = Path("/proc/no-such-folder/index.sqlite")  # where nothing can be created
    assert len(list(index.records())) == 5 and index.in_memory


def test_a_json_file_that_is_no_record_is_served_but_never_found_as_one(tmp_path):
    folder = tmp_path / "runs"
    write_record(tiny_record(1), folder)
    (folder / "notes.json").write_text(json.dumps({"not": "a record"}))
    assert {"not": "a record"} in list(iter_records(folder))
    assert [r["id"] for r in find_records(folder, protocol="knn", fingerprint="f" * 16, model="model1")] == ["r000001"]


def test_reindex_cli(tmp_path, capsys):
    from harness.cli import main

    folder = tmp_path / "runs"
    for i in range(30):
        write_record(tiny_record(i), folder)
    (folder / "bad.json").write_text("{")
    assert main(["records", "reindex", "--runs", str(folder)]) == 0
    out = capsys.readouterr()
    assert "indexed 30 records" in out.out and "1 unreadable" in out.out
    assert str(folder / "bad.json") in out.err
    assert main(["records", "reindex", "--runs", str(tmp_path / "nothing")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error:")


def test_the_index_leaves_the_folder_mtime_alone(tmp_path):
    """Reading never changes the records folder (SQLite's journal lives in .index/), so an
    unchanged folder is answered without listing it."""
    folder = tmp_path / "runs"
    for i in range(5):
        write_record(tiny_record(i), folder)
    old = folder.stat().st_mtime_ns - 10 * records_index.MTIME_TRUST_NS
    os.utime(folder, ns=(old, old))
    index = records_index.index_of(folder)
    assert index.refresh() is True  # the folder changed since the last full look
    assert folder.stat().st_mtime_ns == old
    assert index.refresh() is False
    assert len(list(iter_records(folder))) == 5

