"""A records folder's leaderboard files, plots and report are read from its index's number rows
(harness.results.run_table.table_of_folder, the kept table on a second call), never from the
records turned into dicts and flattened again; they are byte for byte what the same records give as
dicts (table_of_records: the path a run's own leaderboard takes) and what a load_results() frame of
them gives (read off its columns: no internal path calls to_records), computed here in the same
test. A record whose metrics are all null (``metrics_undefined``) has no number row: its "not
applicable" part is kept in the index too, so a folder's leaderboard says n/a where the run's said
it. The files a run writes (harness.running.suite.finish_suite) are the bytes `ssl-bench
leaderboard` writes again from its records folder, whatever the order of the run's records."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from harness.per_image import hits_block
from harness.results.leaderboard import write_leaderboard
from harness.results.pair_status import undefined_parts
from harness.results.pair_status import FAILED, NOT_APPLICABLE, PairStatus
from harness.results.records import iter_records, load_results, make_record, write_record
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
        if name == "knn_b":  # read through an adapter: its reading says how
            model["adapter"] = {"adapter": "timm", "input_norm": "imagenet", "layers": [11], "stride": 16}
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


def _no_to_records(monkeypatch) -> None:
    """to_records raises, wherever a module holds it: a path that makes records of a frame fails."""
    import sys

    def refuse(df):
        raise AssertionError("an internal path made records of a load_results() frame (to_records)")

    for name, module in list(sys.modules.items()):
        if name.startswith(("harness", "benchmarks")) and hasattr(module, "to_records"):
            monkeypatch.setattr(module, "to_records", refuse)


def test_a_frame_gives_the_tables_and_files_its_folder_gives_without_to_records(tmp_path, monkeypatch):
    from harness.results.explain import explain, resolve_sides
    from harness.results.leaderboard import build_leaderboard, format_console

    runs = tmp_path / "results" / "runs"
    for r in _records():
        write_record(r, runs)
    _no_to_records(monkeypatch)
    folder = table_of_folder(runs)
    frame = load_results(runs)
    for table in (build_leaderboard(frame), table_of_records(frame.iloc[::-1])):  # any row order
        assert (table.models, table.keys) == (folder.models, folder.keys)
        for a, b in ((table.mean, folder.mean), (table.std, folder.std), (table.n, folder.n)):
            np.testing.assert_array_equal(a, b)  # the same rows, added in the same order
        assert table.model_info == folder.model_info and table.readings == folder.readings
        assert table.no_number == folder.no_number and table.per_image.keys() == folder.per_image.keys()
        assert format_console(table) == format_console(folder)
    assert "timm · imagenet · layers [11], stride 16" in folder.readings["knn_b"]
    new = _written(build_leaderboard(frame), tmp_path / "frame", folder.no_number)  # plots included
    assert new == _written(folder, tmp_path / "folder", folder.no_number)
    page = build_report(frame, generated=NOW, paper_tables=[], pairs=folder.no_number)
    assert page == build_report(runs, generated=NOW, paper_tables=[], pairs=folder.no_number)
    ids = sorted(r["id"] for r in iter_records(runs) if r["model"]["name"] in ("knn_a", "knn_b"))
    diffs, _ = explain(*resolve_sides(ids[0], ids[1], runs))
    assert diffs


def test_the_run_writes_the_files_the_leaderboard_command_writes_again(tmp_path, monkeypatch):
    from harness.cli import main
    from harness.running import suite as suite_mod

    results = tmp_path / "results"
    records = _records()
    for r in records:
        write_record(r, results / "runs")
    pairs = [PairStatus("knn_a", "linear", "synth", FAILED, "RuntimeError: out of memory"),
             PairStatus("knn_b", "seg_linear", "synth", NOT_APPLICABLE, "no segmentation head for this model")]
    checks = ["Margins over the reference rows\nknn_a  +3.00  pass", "every margin met"]
    monkeypatch.setattr(suite_mod, "suite_checks", lambda suite, recs, paper=None: (list(checks), []))
    monkeypatch.setattr(suite_mod, "report_tables", lambda suite: [])
    done = suite_mod.finish_suite(records[::-1], [], 0.0, results, log=lambda *a: None, pairs=pairs)  # run order
    assert main(["leaderboard", "--runs", str(results / "runs"), "--out", str(tmp_path / "again")]) == 0
    written = {k: Path(p) for k, p in done["paths"].items() if k not in ("pairs", "checks", "report")}
    assert {"md", "long_csv", "html"} <= set(written) and any(k.startswith("plot_") for k in written)
    for name, path in written.items():
        assert path.read_bytes() == (tmp_path / "again" / path.name).read_bytes(), name
    md = (results / "leaderboard.md").read_text()
    assert "every margin met" in md and "out of memory" in md and "no attention" in md
    assert "How each model was read" in md
