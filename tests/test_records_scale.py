"""Results at scale: the commands that read records import neither torch nor timm; the
protocols' declarations are readable without importing them; one RunTable under every view;
95% intervals over seeds (none for one seed, and saying so); the rows the best cannot be told
apart from; plots that stay readable with many models."""
from __future__ import annotations

import csv
import io
import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from harness.results.leaderboard import build_leaderboard, long_table, write_leaderboard
from harness.results.plots import PLOT_MODELS, plot_selection
from harness.results.run_table import T975, run_table, t975

REPO = Path(__file__).resolve().parent.parent


def _rec(model: str, value: float, seed: int | None, *, protocol: str = "knn", variant: dict | None = None,
         context: str | None = None, i: int = 0) -> dict:
    m = {"name": model, "method": "dino", "arch": "vit_tiny", "weights_key": f"w-{model}"}
    if context:
        m["context"], m["method"] = context, context
    return {"id": f"{model}-{protocol}-{seed}-{i}", "created": "2026-01-01T00:00:00+00:00", "model": m,
            "protocol": {"name": protocol, "dataset": "synth", "split": "val", "fingerprint": "f" * 16,
                         "params": {}},
            "seed": seed, "variant": variant if variant is not None else {"k": 20, "feature": "cls"},
            "metrics": {"top1" if protocol == "knn" else "mIoU": value}, "cost": {"device_type": "cpu"}}


def _write(folder: Path, records: list[dict]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for r in records:
        (folder / f"{r['id']}.json").write_text(json.dumps(r))


@pytest.mark.parametrize("command", [["leaderboard"], ["report"], ["records", "reindex"]])
def test_commands_that_read_records_import_neither_torch_nor_timm(tmp_path, command):
    runs = tmp_path / "runs"
    _write(runs, [_rec("a", 50.0, s) for s in (0, 1, 2)] + [_rec("b", 40.0, 0)] +
           [_rec("a", 30.0, 0, protocol="dense_nn", variant={"fraction": "1/8"})])
    out = ["--out", str(tmp_path / ("report.html" if command == ["report"] else "out"))] \
        if command[0] != "records" else []
    code = ("import sys; from harness.cli import main; rc = main(sys.argv[1:]); "
            "heavy = sorted(m for m in ('torch', 'timm', 'torchvision') if m in sys.modules); "
            "print('HEAVY', heavy); sys.exit(rc)")
    proc = subprocess.run([sys.executable, "-c", code, *command, "--runs", str(runs), *out],
                          cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "HEAVY []" in proc.stdout, proc.stdout[-500:]


def _commands(parser) -> set[str]:
    import argparse

    return set(next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices)


def test_each_subcommand_module_adds_the_commands_it_is_listed_with():
    import argparse
    import importlib

    from harness.cli import SUBCOMMAND_MODULES, build_parser

    builtin = _commands(build_parser("run"))
    for module, commands in SUBCOMMAND_MODULES.items():
        sub = argparse.ArgumentParser().add_subparsers()
        importlib.import_module(module).add_cli(sub)
        assert set(sub.choices) == set(commands), module
        assert not set(commands) & builtin
        assert _commands(build_parser(commands[0])) == builtin | set(commands)
    # help or an unknown command: every command, so that argparse lists them all
    every = builtin | {c for cs in SUBCOMMAND_MODULES.values() for c in cs}
    assert _commands(build_parser(None)) == _commands(build_parser("no-such-command")) == every


def test_every_builtin_protocol_class_comes_from_its_declared_module():
    from harness.registry import PROTOCOLS, protocol_declarations

    declared = protocol_declarations()
    builtin = {n for n in PROTOCOLS.names() if PROTOCOLS.get(n).__module__.startswith("benchmarks.")}
    assert builtin == set(declared), "a built-in protocol without its declaration file"
    for name, d in declared.items():
        assert PROTOCOLS.get(name).__module__ == d.module
        assert PROTOCOLS.get(name).declaration() is d


def test_t_quantiles():
    assert t975(2) == T975[2] == pytest.approx(4.302652730)
    # past the table: the Cornish-Fisher expansion, continuous with it and approaching 1.96
    assert t975(31) == pytest.approx(2.039513446, abs=1e-7)
    assert t975(100) == pytest.approx(1.983971519, abs=1e-7)
    assert t975(30) > t975(31) > t975(100) > 1.96
    assert math.isnan(t975(0))


def test_long_csv_appends_the_95_percent_interval_and_says_when_there_is_none(tmp_path):
    recs = [_rec("a", v, s) for s, v in enumerate((50.0, 52.0, 54.0))] + [_rec("b", 40.0, 0)]
    paths = write_leaderboard(recs, tmp_path)
    rows = list(csv.DictReader(io.StringIO(paths["long_csv"].read_text())))
    header = paths["long_csv"].read_text().splitlines()[0].split(",")
    assert header[-3:] == ["ci95_low", "ci95_high", "ci_method"]
    assert header[:13] == ["model", "method", "arch", "protocol", "dataset", "split", "variant", "metric",
                           "fingerprint", "column", "mean", "std", "n"]
    a, b = (next(r for r in rows if r["model"] == m) for m in ("a", "b"))
    half = T975[2] * 2.0 / math.sqrt(3)  # std of 50, 52, 54 is 2
    assert float(a["ci95_low"]) == pytest.approx(52.0 - half) and float(a["ci95_high"]) == pytest.approx(52.0 + half)
    assert a["ci_method"] == "t over seeds"
    assert b["ci95_low"] == b["ci95_high"] == "" and b["ci_method"] == "none: one seed"
    assert len(long_table(build_leaderboard(recs))) == 2


def test_rows_the_best_cannot_be_told_apart_from():
    recs = ([_rec("best", v, s) for s, v in enumerate((60.0, 61.0, 62.0))]
            + [_rec("close", v, s) for s, v in enumerate((58.0, 60.0, 62.0))]  # overlaps the best
            + [_rec("far", v, s) for s, v in enumerate((40.0, 40.5, 41.0))]
            + [_rec("single", 60.9, 0)])  # one seed: no interval, never marked
    t = run_table(build_leaderboard(recs))
    key = t.keys[0]
    assert t.tied_with_best(key, t.models) == {"close"}


def test_report_marks_ties_shows_intervals_and_gives_context_rows_no_delta():
    from harness.results.report import build_report

    recs = ([_rec("best", v, s) for s, v in enumerate((60.0, 61.0, 62.0))]
            + [_rec("close", v, s) for s, v in enumerate((58.0, 60.0, 62.0))]
            + [_rec("rand", 10.0, 0, context="random_init"), _rec("chance", 1.0, 0, context="chance"),
               _rec("pixels", 5.0, 0, context="pixels")])
    page = build_report(recs, paper_tables=[], generated="2026-01-01T00:00:00+00:00")
    assert 'class="tied"' in page and "95% CI [" in page and "n=1: no interval" in page

    def cell_of(model: str) -> str:
        start = page.index(f'data-text="{model} ')
        return page[start:page.index("</tr>", start)]

    assert "vs random init" in cell_of("best") and "vs random init" in cell_of("close")
    for context_row in ("chance", "pixels"):
        assert "vs random init" not in cell_of(context_row)
    assert "baseline" in cell_of("rand")


def test_plots_draw_a_selection_of_many_models(tmp_path):
    recs = [_rec(f"m{i:02d}", float(i), 0) for i in range(50)]
    recs += [_rec(f"m{i:02d}", float(i), 0, protocol="dense_nn", variant={"fraction": f}, i=j)
             for i in range(50) for j, f in enumerate(("1/8", "1/2", "1"))]
    t = run_table(build_leaderboard(recs))
    models, note = plot_selection(t, [k for k in t.keys if k[0] == "knn"])
    assert len(models) == PLOT_MODELS and note == f"top {PLOT_MODELS} of 50 models by mean"
    assert models == [f"m{i:02d}" for i in range(50 - PLOT_MODELS, 50)]
    paths = write_leaderboard(t, tmp_path)
    assert paths["plot_knn"].is_file() and any(k.startswith("curve_dense_nn") for k in paths)


def test_one_run_table_serves_every_view():
    recs = [_rec("a", 50.0, s) for s in (0, 1)] + [_rec("b", 40.0, 0)]
    df = build_leaderboard(recs)
    t = run_table(df)
    assert run_table(t) is t
    assert t.models == ["a", "b"] and t.n.tolist() == [[2], [1]]
    assert np.allclose(t.mean[:, 0], [50.0, 40.0])
    assert t.cell("a", t.keys[0]) == (50.0, 0.0, 2)


def test_the_chance_row_says_its_number_is_computed_not_measured():
    from harness.results.run_table import CI_COMPUTED, CI_NONE

    t = run_table(build_leaderboard([_rec("chance", 10.0, 0, context="chance"), _rec("m", 50.0, 0)]))
    assert t.ci_method("chance", t.keys[0]) == CI_COMPUTED and t.ci_method("m", t.keys[0]) == CI_NONE
