"""mmengine's output of one segmentation run, kept in the run's log file instead of the console.

mmengine's Runner logs its environment and its whole config (about 430 lines a run) through an
MMLogger whose console handler writes to stdout, and mmseg / mmengine add Python warnings and
plain ``print`` lines. Within :func:`run_log`, the Runner built by ``RunLog.build_runner``
keeps only errors on the console: everything else goes to the file its logger already writes
(``<work_dir>/<timestamp>/<timestamp>.log``), the warnings and prints too; the run then prints
one line (:func:`run_line`), as the other protocols do.
"""
from __future__ import annotations

import contextlib
import io
import logging
import sys
import warnings
from pathlib import Path
from typing import Any, Iterator, TextIO


def quiet_console(logger: logging.Logger, console: TextIO | None = None) -> None:
    """Errors only on the console handlers of ``logger`` (an MMLogger); its file handler keeps
    every level. ``console``: the stream its console handler writes to from now on."""
    for handler in logger.handlers:
        if isinstance(handler, logging.StreamHandler) and not isinstance(handler, logging.FileHandler):
            handler.setLevel(max(handler.level, logging.ERROR))
            if console is not None:
                handler.setStream(console)


class _Lines(io.TextIOBase):
    """A text stream whose whole lines go to ``emit``."""

    def __init__(self, emit):
        self._emit, self._buf = emit, ""

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        self._buf += text
        *lines, self._buf = self._buf.split("\n")
        for line in lines:
            if line.strip():
                self._emit(line)
        return len(text)

    def flush(self) -> None:
        if self._buf.strip():
            self._emit(self._buf)
        self._buf = ""


class RunLog:
    """Where one run's mmengine output goes: its Runner's logger once built; lines from before
    (a warning while the config is read) wait for it."""

    def __init__(self, console: TextIO):
        self.console = console
        self.logger: logging.Logger | None = None
        self.log_file: str | None = None
        self._pending: list[tuple[int, str]] = []

    def emit(self, line: str, level: int = logging.INFO) -> None:
        if self.logger is None:
            self._pending.append((level, line))
        else:
            self.logger.log(level, line)

    def show_warning(self, message, category, filename, lineno, file=None, line=None) -> None:
        self.emit(warnings.formatwarning(message, category, filename, lineno, line).rstrip(), logging.WARNING)

    def attach(self, logger: logging.Logger, log_file: str | None) -> None:
        self.logger, self.log_file = logger, log_file
        for level, line in self._pending:
            logger.log(level, line)
        self._pending.clear()

    def release(self) -> None:
        """Lines no logger took (the Runner was never built) go to the console: nothing is lost."""
        for _, line in self._pending:
            print(line, file=self.console)
        self._pending.clear()

    def build_runner(self, cfg: Any):
        """mmengine's ``Runner.from_cfg(cfg)``, whose logger writes to the console errors only."""
        return self.runner_class().from_cfg(cfg)

    def runner_class(self) -> type:
        """mmengine's Runner, whose logger writes errors only to the console and tells this log its file."""
        from mmengine.runner import Runner

        run_log = self

        class QuietRunner(Runner):
            def build_logger(self, log_level="INFO", log_file=None, **kwargs):
                # the file the Runner logs to by default, named here so that the record can point to it
                log_file = log_file or str(Path(self.log_dir) / f"{self.timestamp}.log")
                logger = super().build_logger(log_level=log_level, log_file=log_file, **kwargs)
                quiet_console(logger, run_log.console)
                run_log.attach(logger, log_file)
                return logger

        return QuietRunner


@contextlib.contextmanager
def run_log() -> Iterator[RunLog]:
    """Within: Python warnings and ``print`` output go to the run's log (see the module doc)."""
    log = RunLog(sys.stdout)
    lines = _Lines(log.emit)
    try:
        with warnings.catch_warnings(), contextlib.redirect_stdout(lines):
            warnings.showwarning = log.show_warning
            yield log
            lines.flush()
    finally:
        log.release()


def run_line(head: str, dataset: str, lr: float, metrics: dict, iters: int, log_file: str | None,
             stream: TextIO | None = None) -> None:
    """The one line a run prints (to stderr, as dense NN's progress lines)."""
    where = f"; mmengine log {log_file}" if log_file else " (its last validation was logged before)"
    print(f"[mmseg {head} head] {dataset} lr {lr:g}: mIoU {metrics.get('mIoU', float('nan')):.2f} after {iters} "
          f"iterations"
          f"{where}", file=stream or sys.stderr)


__all__ = ["quiet_console", "RunLog", "run_log", "run_line"]
