"""``ssl-bench data prepare KEY --from DOWNLOAD --out DIR``: the official download of a data set
rearranged into the layout its reader reads. The data set's catalogue entry names the module that
does it (``DataSet.prepare``, or ``Layout.prepare`` for a layout of its own: a module whose
``prepare(steps)`` runs its :class:`Steps`), so the core names none.

Every preparation works in steps, each written into a staging folder inside ``out`` and renamed into
place when complete, and recorded in ``out/.prepared.json``: a second run skips what is done
(idempotent) and an interrupted one resumes at the step it was in. Nothing is written into the
download (archives are read where they are, or linked into the staging folder).
"""
from __future__ import annotations

import importlib
import json
import os
import shutil
from pathlib import Path
from typing import Callable

from harness.errors import ConfigError, DataError

RECORD = ".prepared.json"


class Steps:
    """The steps of one preparation into ``out``: ``run(name, make)`` calls ``make(staging)`` unless
    ``name`` is recorded as done, then moves what it wrote into ``out`` and records it."""

    def __init__(self, key: str, download: Path, out: Path, log: Callable[[str], None] = print):
        self.key, self.download, self.out, self.log = key, download, out, log
        self.record_path = out / RECORD
        self.done: dict = {}
        if self.record_path.is_file():
            recorded = json.loads(self.record_path.read_text())
            if recorded.get("key") != key:
                raise DataError(f"{out} was prepared for {recorded.get('key')!r}, not {key!r}; choose another --out")
            self.done = recorded.get("steps", {})

    def staging(self, name: str) -> Path:
        folder = self.out / f".staging-{name}"
        shutil.rmtree(folder, ignore_errors=True)  # a step interrupted earlier starts again
        folder.mkdir(parents=True)
        return folder

    def run(self, name: str, make: Callable[[Path], dict | None]) -> bool:
        """Whether the step ran now (False: done before)."""
        if name in self.done:
            self.log(f"  {name}: done before, skipped")
            return False
        staging = self.staging(name)
        try:
            facts = make(staging) or {}
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
        for item in sorted(staging.iterdir()):
            if item.name.startswith("."):
                continue
            target = self.out / item.name
            if target.exists():
                _merge(item, target)
            else:
                os.rename(item, target)
        shutil.rmtree(staging)
        self.done[name] = facts
        self._write()
        self.log(f"  {name}: done" + (f" ({', '.join(f'{k} {v}' for k, v in facts.items())})" if facts else ""))
        return True

    def _write(self) -> None:
        tmp = self.record_path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"key": self.key, "from": str(self.download), "steps": self.done}, indent=1) + "\n")
        os.replace(tmp, self.record_path)


def _merge(src: Path, dst: Path) -> None:
    """Move the contents of folder ``src`` into the existing folder ``dst`` (a file there is replaced)."""
    if not (src.is_dir() and dst.is_dir()):
        os.replace(src, dst)
        return
    for item in src.iterdir():
        _merge(item, dst / item.name) if (dst / item.name).exists() else os.rename(item, dst / item.name)


def require(download: Path, *names: str) -> list[Path]:
    """The download's files ``names``; a DataError naming the absent ones."""
    paths = [download / n for n in names]
    absent = [p.name for p in paths if not p.exists()]
    if absent:
        raise DataError(f"{download} lacks {', '.join(absent)} (the official download's files; "
                        f"`ssl-bench data list` says where they come from)")
    return paths


def prepare(key: str, download: str | Path, out: str | Path, log: Callable[[str], None] = print) -> Path:
    """Prepare data set ``key`` from ``download`` into ``out``; returns ``out``."""
    from harness.data.catalogue import resolve

    ds, layout = resolve(key)
    module = layout.prepare or ds.prepare
    if module is None:
        raise ConfigError(f"data set {ds.key!r} needs no preparation step here (its download is the reader's "
                          f"layout, or no preparer is written yet): see `ssl-bench data list {ds.key}`")
    download, out = Path(download).resolve(), Path(out).resolve()
    if not download.is_dir():
        raise DataError(f"--from {download} is not a folder holding the official download")
    if out == download or download in out.parents or out in download.parents:
        raise ConfigError(f"--out {out} and --from {download} overlap; the download is never written into")
    out.mkdir(parents=True, exist_ok=True)
    log(f"prepare {ds.key} from {download} into {out}")
    importlib.import_module(module).prepare(Steps(ds.key, download, out, log))
    return out
