"""mmengine's output of a segmentation run goes to the run's log file, not the console: the
Runner's environment and config dump, its logger's lines, Python warnings and print() lines;
errors still reach the console."""
from __future__ import annotations

import warnings

import pytest

pytest.importorskip("mmengine")

import torch  # noqa: E402

from benchmarks.segmentation.mmengine_log import run_line, run_log  # noqa: E402


class _Toy(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Linear(2, 2)


def test_runner_logger_warnings_and_prints_land_in_the_file(tmp_path, capfd):
    with run_log() as quiet:
        # default_scope as a seg run sets it: a Runner makes its scope the current one for the
        # whole process, and mmengine's own would send later mmseg builds to mmengine's registry
        runner = quiet.runner_class()(model=_Toy(), work_dir=str(tmp_path / "work"), default_scope="mmseg",
                                      experiment_name=f"quiet_{tmp_path.name}")
        runner.logger.info("a tiny mmengine info line")
        runner.logger.warning("a tiny mmengine warning")
        print("a stray print line")
        warnings.warn("a stray python warning")
        runner.logger.error("an mmengine error")
    out, err = capfd.readouterr()
    console = out + err
    for text in ("System environment", "a tiny mmengine info line", "a tiny mmengine warning",
                 "a stray print line", "a stray python warning"):
        assert text not in console
    assert "an mmengine error" in console  # errors still reach the console
    assert quiet.log_file and quiet.log_file.startswith(str(tmp_path / "work"))
    saved = open(quiet.log_file).read()
    for text in ("System environment", "a tiny mmengine info line", "a tiny mmengine warning",
                 "a stray print line", "a stray python warning", "an mmengine error"):
        assert text in saved


def test_lines_before_the_runner_are_not_lost(capfd):
    with run_log():
        warnings.warn("a warning no runner took")
    out, err = capfd.readouterr()
    assert "a warning no runner took" in out + err


def test_one_line_per_run(capsys):
    run_line("linear", "synth_ade", 0.01, {"mIoU": 3.05}, 20, "/w/lr0.01/t/t.log")
    err = capsys.readouterr().err.splitlines()
    assert err == ["[mmseg linear head] synth_ade lr 0.01: mIoU 3.05 after 20 iterations; mmengine log "
                   "/w/lr0.01/t/t.log"]
