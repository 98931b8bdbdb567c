"""A records folder's grouped table is kept beside its index for one set of record files: read
back unchanged, grouped again when a record is added, rewritten or removed, when the kept files
are damaged, or when the grouping code is another."""
from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

from harness.results import kept_table, run_table
from harness.results.leaderboard import build_leaderboard, to_markdown


def _rec(model: str, value: float, seed: int, sha: str = "a" * 64, fingerprint: str = "f" * 16) -> dict:
    return {"id": f"{model}-{seed}-{fingerprint[:4]}", "created": "2026-01-01T00:00:00+00:00",
            "model": {"name": model, "method": "dino", "arch": "vit_tiny", "weights_key": f"w-{model}",
                      "weights_sha256": sha},
            "protocol": {"name": "knn", "dataset": "synth", "split": "val", "fingerprint": fingerprint,
                         "params": {}},
            "seed": seed, "variant": {"k": 20, "feature": "cls"}, "metrics": {"top1": value},
            "cost": {"device_type": "cpu"}}


def _write(folder: Path, records: list[dict]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for r in records:
        (folder / f"{r['id']}.json").write_text(json.dumps(r))


@pytest.fixture
def runs(tmp_path) -> Path:
    folder = tmp_path / "runs"
    _write(folder, [_rec("a", 50.0 + s, s) for s in range(3)] + [_rec("b", 40.0, 0)]
           + [_rec("c", 30.0, 0, fingerprint="e" * 16)])  # a second fingerprint: a conflict message
    return folder


@pytest.fixture
def grouped(monkeypatch) -> list[int]:
    """How many times the numbers were grouped."""
    calls: list[int] = []
    real = run_table.table_of_numbers

    def counted(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(run_table, "table_of_numbers", counted)
    return calls


def _same(a, b) -> None:
    assert a.models == b.models and a.keys == b.keys and a.model_info == b.model_info
    assert a.messages == b.messages and a.conflicts == b.conflicts and a.per_image == b.per_image
    for name in ("mean", "std", "n"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name))


def test_an_unchanged_folder_reads_its_kept_table(runs, grouped):
    first = build_leaderboard(runs_dir=runs)
    second = build_leaderboard(runs_dir=runs)
    assert len(grouped) == 1
    _same(first, second)
    assert first.messages  # the conflict's message is worded again from the kept conflict
    assert to_markdown(first) == to_markdown(second)


def test_an_added_rewritten_or_removed_record_groups_again(runs, grouped):
    build_leaderboard(runs_dir=runs)
    _write(runs, [_rec("d", 10.0, 0)])
    assert "d" in build_leaderboard(runs_dir=runs).models and len(grouped) == 2
    path = runs / "b-0-ffff.json"
    path.write_text(json.dumps(_rec("b", 45.5, 0)))
    os.utime(path, ns=(path.stat().st_atime_ns, path.stat().st_mtime_ns + 10**9))
    t = build_leaderboard(runs_dir=runs)
    key = next(k for k in t.keys if k[5] == "f" * 16)
    assert len(grouped) == 3 and t.cell("b", key)[0] == 45.5
    path.unlink()
    assert "b" not in build_leaderboard(runs_dir=runs).models and len(grouped) == 4


def test_damaged_kept_files_are_grouped_again(runs, grouped):
    first = build_leaderboard(runs_dir=runs)
    kept = runs / ".index" / f"{kept_table.STEM}.npz"
    kept.write_bytes(b"not an archive")
    _same(first, build_leaderboard(runs_dir=runs))
    assert len(grouped) == 2
    (runs / ".index" / f"{kept_table.STEM}.json").write_text("{")
    _same(first, build_leaderboard(runs_dir=runs))
    assert len(grouped) == 3


def test_the_key_names_the_files_their_stamps_and_the_grouping_code(monkeypatch, tmp_path):
    stamps = {"a.json": (1, 10), "b.json": (2, 20)}
    key = kept_table.records_key(stamps)
    assert key == kept_table.records_key(dict(reversed(stamps.items())))  # order does not matter
    assert key != kept_table.records_key({**stamps, "b.json": (3, 20)})
    assert key != kept_table.records_key({"a.json": (1, 10)})
    code = tmp_path / "code"
    code.mkdir()
    here = Path(kept_table.__file__).parent
    for name in kept_table._GROUPING_CODE:
        (code / name).parent.mkdir(parents=True, exist_ok=True)
        (code / name).write_bytes((here / name).read_bytes())
    monkeypatch.setattr(kept_table, "__file__", str(code / "kept_table.py"))
    assert kept_table.records_key(stamps) == key
    (code / "table.py").write_bytes((here / "table.py").read_bytes() + b"\n# another version\n")
    assert kept_table.records_key(stamps) != key
