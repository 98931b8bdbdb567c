"""A generated data set is written once: atomically, found again by its meta.json, and never
written over another data set or into a folder that holds something else."""
from __future__ import annotations

import pytest

from harness.data.generated import write_once
from harness.errors import DataError


def test_written_once_then_found(tmp_path):
    calls = []

    def write(folder):
        calls.append(folder)
        (folder / "a.txt").write_text("x")

    meta = {"generator": "demo", "preset": "tiny", "seed": 0}
    out = write_once(tmp_path / "set", meta, write)
    assert (out / "a.txt").read_text() == "x" and (out / "meta.json").is_file()
    assert write_once(tmp_path / "set", meta, write) == out and len(calls) == 1
    with pytest.raises(DataError, match="holds another data set"):
        write_once(tmp_path / "set", {**meta, "seed": 1}, write)


def test_an_interrupted_write_leaves_nothing_and_a_full_folder_is_refused(tmp_path):
    def broken(folder):
        (folder / "half.txt").write_text("x")
        raise RuntimeError("killed")

    with pytest.raises(RuntimeError):
        write_once(tmp_path / "set", {"seed": 0}, broken)
    assert not (tmp_path / "set").exists() and not list(tmp_path.iterdir())
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "file").write_text("mine")
    with pytest.raises(DataError, match="not empty and has no meta.json"):
        write_once(tmp_path / "other", {"seed": 0}, lambda folder: None)
