"""A records folder's leaderboard files, plots and report are read from its index's number rows
(harness.results.run_table.table_of_folder, the kept table on a second call), never from the
records turned into dicts and flattened again; they are byte for byte what the same records give as
dicts (table_of_records: the path a run's own leaderboard takes), computed here in the same test.
A record whose metrics are all null (``metrics_undefined``) has no number row: its "not applicable"
part is kept in the index too, so a folder's leaderboard says n/a where the run's said it."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from harness.per_image import hits_block
from harness.results.leaderboard import write_leaderboard
from harness.results.pair_status import undefined_parts
from harness.results.records import iter_records, make_record, write_record
from harness.results.report import build_report
from harness.results.run_table import table_of_folder, table_of_records
from report_records import all_records

FILES = ("csv", "long_csv", "fingerprints_csv", "md", "html")
NOW = "2026-01-01T00:00:00+00:00"


def _records() -> list[dict]:
    """The report tests' records, two k-NN records with per-image hits (bootstrapped intervals),
    one whose only metric is null (not applicable) and one with a flag."""
    recs = list(all_records())
    rng = np.random.default_rng(0)
    for i, name in enumerate(("knn_a", "knn_b")):
        hits = rng.random(120) < 0.6 + 0.1 * i
        proto = {"name": "knn", "preset": "synth", "dataset": "imagefolder", "split": "val", "params": {},
                 "fingerprint": "c3" * 8, "request": "d4" * 8, "data_root": "/data/synth", "data_stamp": "s"}
        model = {"name": name, "method": "dino", "arch": "vit_cpu_tiny", "weights_key": f"w-{name}"}
        recs.append(make_record(model, proto, None, {"k": 10, "feature": "cls"}, {"top1": 100 * float(hits.mean())},
                                {"wall_s": 1.0}, per_image=hits_block({"top1": hits})))
    model = {"name": "knn_a", "method": "dino", "arch": "vit_cpu_tiny", "weights_key": "w-knn_a"}
    proto = {"name": "robustness", "preset": "synth", "dataset": "imagefolder", "split": "val", "params": {},
             "fingerprint": "e5" * 8, "request": "f6" * 8}
    recs.append(make_record(model, proto, None, {}, {"occlusion": None}, {"wall_s": 1.0},
                            metrics_undefined={"occlusion": "not applicable: the model has no attention"}))
    flagged = make_record(model, {**proto, "name": "knn", "fingerprint": "c3" * 8}, 1, {"k": 20, "feature": "cls"},
                          {"top1": 50.0}, {"wall_s": 1.0}, flags=["feature grid 2x2 below the protocol's 4x4"])
    recs.append(flagged)
    for r in recs:
        r["created"] = NOW
    return recs


def _written(table, out: Path, pairs) -> dict[str, bytes]:
    paths = write_leaderboard(table, out, pairs=pairs)
    return {k: Path(p).read_bytes() for k, p in paths.items()}


def test_a_folder_gives_the_files_its_records_give(tmp_path):
    records = _records()
    runs = tmp_path / "results" / "runs"
    for r in records:
        write_record(r, runs)
    records = list(iter_records(runs))  # as `ssl-bench report` read them: file-name order, the sums' order
    parts = undefined_parts(records)
    assert any(p.state == "not applicable" for p in parts) and any(p.state == "flagged" for p in parts)
    old = _written(table_of_records(records, kept_in=runs), tmp_path / "old", parts)
    old_report = build_report(records, generated=NOW, paper_tables=[], pairs=parts)
    for call in ("grouped", "kept"):  # the first call groups the rows, the second reads the kept table
        table = table_of_folder(runs)
        assert [(p.model, p.state, p.reason) for p in table.no_number] == [(p.model, p.state, p.reason) for p in parts]
        new = _written(table, tmp_path / call, table.no_number)
        assert set(new) == set(old) and {k for k in old if k.startswith(("plot_", "curve_"))}
        for name in old:
            assert new[name] == old[name], f"{call}: {name} differs"
        assert build_report(runs, generated=NOW, paper_tables=[]) == old_report, call
    assert b"not applicable" in old["md"] and b"no attention" in old["md"]


def test_the_leaderboard_command_reads_the_parts_without_a_number(tmp_path, capsys):
    from harness.cli import main

    runs = tmp_path / "results" / "runs"
    for r in _records():
        write_record(r, runs)
    assert main(["leaderboard", "--runs", str(runs), "--out", str(tmp_path / "lb")]) == 0
    md = (tmp_path / "lb" / "leaderboard.md").read_text()
    assert "no attention" in md and "below the protocol's 4x4" in md
