"""Leaderboard figures are drawn when what they show changed, and only then."""
from __future__ import annotations

import json

import pytest

from harness.results import plots
from harness.results.leaderboard import build_leaderboard, write_leaderboard
from harness.results.run_table import run_table
from test_records_scale import _rec


def _table(value: float = 50.0, models: int = 3):
    recs = [_rec(f"m{i}", value + i, 0) for i in range(models)]
    recs += [_rec(f"m{i}", value + i, 0, protocol="dense_nn", variant={"fraction": f}, i=j)
             for i in range(models) for j, f in enumerate(("1/8", "1/2", "1"))]
    return run_table(build_leaderboard(recs))


@pytest.fixture
def drawn(monkeypatch):
    """The figures actually drawn, by file name."""
    names: list[str] = []
    for kind, draw in list(plots.DRAWERS.items()):
        def spy(spec, path, _draw=draw):
            names.append(path.name)
            _draw(spec, path)
        monkeypatch.setitem(plots.DRAWERS, kind, spy)
    return names


def test_unchanged_figures_are_not_drawn_again(tmp_path, drawn):
    paths = write_leaderboard(_table(), tmp_path)
    figures = sorted(p.name for k, p in paths.items() if k.startswith(("plot_", "curve_")))
    assert sorted(drawn) == figures and len(figures) == 3  # knn and dense_nn bars, one curve
    stamps = json.loads((tmp_path / plots.STAMPS).read_text())
    assert sorted(stamps) == figures
    before = {name: (tmp_path / name).stat().st_mtime_ns for name in figures}
    drawn.clear()
    again = write_leaderboard(_table(), tmp_path)
    assert drawn == [] and again == paths
    assert {name: (tmp_path / name).stat().st_mtime_ns for name in figures} == before


def test_a_changed_number_model_file_or_code_draws_again(tmp_path, drawn, monkeypatch):
    write_leaderboard(_table(), tmp_path)
    drawn.clear()
    write_leaderboard(_table(value=51.0), tmp_path)  # every number changed
    assert len(drawn) == 3
    drawn.clear()
    write_leaderboard(_table(value=51.0, models=4), tmp_path)  # a model more
    assert len(drawn) == 3
    drawn.clear()
    (tmp_path / "knn_bars.png").write_bytes(b"not the figure")  # an edited file
    (tmp_path / "dense_nn_bars.png").unlink()  # a deleted one
    write_leaderboard(_table(value=51.0, models=4), tmp_path)
    assert sorted(drawn) == ["dense_nn_bars.png", "knn_bars.png"]
    assert (tmp_path / "knn_bars.png").read_bytes()[:4] == b"\x89PNG"
    drawn.clear()
    monkeypatch.setattr(plots, "figure_key", lambda spec: "other drawing code")
    write_leaderboard(_table(value=51.0, models=4), tmp_path)
    assert len(drawn) == 3


def test_unreadable_stamps_only_mean_drawing_again(tmp_path, drawn):
    write_leaderboard(_table(), tmp_path)
    (tmp_path / plots.STAMPS).write_text("{not json")
    drawn.clear()
    write_leaderboard(_table(), tmp_path)
    assert len(drawn) == 3
    assert len(json.loads((tmp_path / plots.STAMPS).read_text())) == 3


def test_the_key_covers_the_spec_the_code_and_matplotlib(monkeypatch):
    spec = plots.bar_spec(_table(), "knn")
    key = plots.figure_key(spec)
    assert key == plots.figure_key(json.loads(json.dumps(spec)))
    assert key != plots.figure_key({**spec, "title": "other"})
    monkeypatch.setattr(plots.metadata, "version", lambda name: "0.0-other")
    assert key != plots.figure_key(spec)
