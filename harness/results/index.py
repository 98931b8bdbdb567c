"""An index of a records folder: SQLite (standard library) beside the JSON files.

The JSON files stay the source of truth; the index holds, per file, its size and mtime, the
fields a run is looked up by (protocol, fingerprint, model name) and the file's text, so that
readers neither open every file nor scan every record for one (model, protocol) pair.

It lives in ``<records folder>/.index/`` (a folder of its own: SQLite's journal files then
never change the records folder's mtime, which is what tells that the folder changed).

- Every record written through :func:`harness.results.records.write_record` is added to it.
- Before it answers, the folder is checked: when the folder's mtime is the one recorded at the
  last full look, nothing was added, renamed or removed; otherwise the folder is listed (names,
  sizes, mtimes: no file is read) and new or changed files are read, gone ones dropped. A file
  written by another process (another suite, a torchrun rank, a SLURM job on a shared file
  system) therefore appears at the next look, whether or not its writer reached the index.
- Every record it serves is checked against its file's size and mtime first: a file deleted
  or rewritten since is dropped or read again, so it never serves a record that has no file.
- A file that cannot be read as JSON is named in one line (once per process) and skipped;
  the rest are served.

The index is a cache: a damaged or foreign index file is rebuilt from the records, and where
the folder cannot be written to, an index in memory serves this process.
``ssl-bench records reindex`` (harness.results.records) rebuilds it on demand.
"""
from __future__ import annotations

import json
import os
import sqlite3
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

SCHEMA_VERSION = 1
INDEX_DIR = ".index"
INDEX_FILE = f"records-v{SCHEMA_VERSION}.sqlite"
# A folder mtime younger than this may not yet show a write made in the same clock tick of the
# file system (coarse timestamps: 2 s on FAT, a jiffy locally): the next look lists it again.
MTIME_TRUST_NS = 2_000_000_000

_SCHEMA = """
CREATE TABLE IF NOT EXISTS files (
    name TEXT PRIMARY KEY,      -- the file's name in the records folder
    mtime_ns INTEGER NOT NULL,
    size INTEGER NOT NULL,
    status TEXT NOT NULL,       -- 'record' | 'other' (JSON, not a result record) | 'bad' (unreadable)
    problem TEXT,               -- why a 'bad' file cannot be read
    protocol TEXT, fingerprint TEXT, model TEXT,
    body TEXT                   -- the file's text ('record' and 'other')
);
CREATE INDEX IF NOT EXISTS files_by_run ON files (protocol, fingerprint, model);
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT);
"""


def _warn(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


# What is named once per process: (folder, file name, mtime_ns, what).
_NAMED: set[tuple] = set()


@dataclass(frozen=True)
class FileRow:
    """What the index holds of one file."""

    name: str
    mtime_ns: int
    size: int
    status: str
    problem: str | None
    protocol: str | None
    fingerprint: str | None
    model: str | None
    body: str | None


def is_record(rec: Any) -> bool:
    """A result record names its model and its protocol (other JSON files are not records)."""
    return (isinstance(rec, dict) and isinstance(rec.get("model"), dict) and bool(rec["model"].get("name"))
            and isinstance(rec.get("protocol"), dict) and bool(rec["protocol"].get("name")))


def read_file_row(path: Path, stat: os.stat_result | None = None) -> FileRow:
    """The index row of one file, read now (stat first: a write after it shows as a change)."""
    st = stat or path.stat()
    try:
        text = path.read_text()
        obj = json.loads(text)
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        why = f"{type(exc).__name__}: {exc}".splitlines()[0][:200]
        return FileRow(path.name, st.st_mtime_ns, st.st_size, "bad", why, None, None, None, None)
    if not is_record(obj):
        return FileRow(path.name, st.st_mtime_ns, st.st_size, "other", None, None, None, None, text)
    proto, model = obj["protocol"], obj["model"]
    fp = proto.get("fingerprint")
    return FileRow(path.name, st.st_mtime_ns, st.st_size, "record", None, str(proto["name"]),
                   None if fp is None else str(fp), str(model["name"]), text)


def _listing(folder: Path) -> dict[str, tuple[int, int]]:
    """{file name: (mtime_ns, size)} of the folder's .json files; no file is opened."""
    out = {}
    try:
        entries = os.scandir(folder)
    except FileNotFoundError:
        return out
    with entries:
        for e in entries:
            if not e.name.endswith(".json"):
                continue
            try:
                if not e.is_file():
                    continue
                st = e.stat()
            except FileNotFoundError:  # removed while listing
                continue
            out[e.name] = (st.st_mtime_ns, st.st_size)
    return out


class RecordIndex:
    """The index of one records folder (see the module's text). Cheap to make: the database
    is opened on first use and kept for this process."""

    def __init__(self, folder: str | Path, warn: Callable[[str], None] | None = None):
        self.folder = Path(folder)
        self.path = self.folder / INDEX_DIR / INDEX_FILE
        self.warn = warn or _warn
        self._db: sqlite3.Connection | None = None
        self._pid = os.getpid()
        self.in_memory = False

    # ------------------------------------------------------------------ connection
    def _connect(self) -> sqlite3.Connection:
        if self._db is not None and self._pid == os.getpid():
            return self._db
        self._pid = os.getpid()  # a forked child opens its own connection
        try:
            self._db = self._open_file()
        except (OSError, sqlite3.Error):
            # a folder we cannot write to (or a file system without locks): this process's own
            self._db = self._open(":memory:")
            self.in_memory = True
        return self._db

    def _open(self, where: str) -> sqlite3.Connection:
        db = sqlite3.connect(where, timeout=60, isolation_level=None, check_same_thread=False)
        db.execute("PRAGMA synchronous=OFF")  # a cache: a torn index is detected and rebuilt
        db.executescript(_SCHEMA)
        return db

    def _open_file(self) -> sqlite3.Connection:
        if not self.folder.is_dir():
            raise FileNotFoundError(self.folder)
        self.path.parent.mkdir(exist_ok=True)
        try:
            return self._open(str(self.path))
        except sqlite3.DatabaseError:  # damaged or not ours: the records rebuild it
            self.path.unlink(missing_ok=True)
            return self._open(str(self.path))

    def _run(self, action: Callable[[sqlite3.Connection], Any]) -> Any:
        """``action(db)``; a damaged index file is removed and rebuilt once from the records."""
        try:
            return action(self._connect())
        except sqlite3.DatabaseError as exc:
            if isinstance(exc, sqlite3.OperationalError) and "locked" in str(exc):
                raise
            self._drop_file()
            return action(self._connect())

    def close(self) -> None:
        if self._db is not None and self._pid == os.getpid():
            self._db.close()
        self._db = None

    def _drop_file(self) -> None:
        self.close()
        if not self.in_memory:
            for p in (self.path, Path(f"{self.path}-journal"), Path(f"{self.path}-wal")):
                p.unlink(missing_ok=True)

    # ------------------------------------------------------------------ writing
    def add(self, path: Path) -> None:
        """Enter one file just written (by this process). Best effort: a writer that cannot
        reach the index loses nothing, the next look at the folder finds the file."""
        try:
            row = read_file_row(Path(path))
            self._run(lambda db: _upsert(db, [row]))
        except (OSError, sqlite3.Error):
            pass

    def refresh(self, full: bool = False) -> bool:
        """Bring the index up to the folder. Unless ``full``, only when the folder's mtime
        differs from the one recorded at the last full look (or that one was too young to
        trust). Returns whether the folder was listed."""
        return self._run(lambda db: self._refresh(db, full))

    def _refresh(self, db: sqlite3.Connection, full: bool) -> bool:
        try:
            folder_mtime = self.folder.stat().st_mtime_ns
        except FileNotFoundError:
            folder_mtime = None
        seen = db.execute("SELECT value FROM meta WHERE key = 'folder_mtime_ns'").fetchone()
        if not full and folder_mtime is not None and seen is not None and seen[0] == str(folder_mtime):
            return False
        listing = _listing(self.folder)
        known = {n: (m, s) for n, m, s in db.execute("SELECT name, mtime_ns, size FROM files")}
        changed = [n for n, ms in listing.items() if known.get(n) != ms]
        rows = []
        for name in changed:
            try:
                rows.append(read_file_row(self.folder / name))
            except FileNotFoundError:
                continue
        gone = [n for n in known if n not in listing and not (self.folder / n).exists()]
        trusted = folder_mtime is not None and time.time_ns() - folder_mtime > MTIME_TRUST_NS
        db.execute("BEGIN IMMEDIATE")
        try:
            _upsert(db, rows, begun=True)
            db.executemany("DELETE FROM files WHERE name = ?", [(n,) for n in gone])
            db.execute("INSERT OR REPLACE INTO meta VALUES ('folder_mtime_ns', ?)",
                       (str(folder_mtime) if trusted else None,))
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise
        for n in gone:
            self._name_once(n, 0, "gone", f"note: record file {self.folder / n} is gone; "
                                          "dropped from the records index")
        return True

    def reindex(self) -> dict[str, int]:
        """Rebuild from the files alone: {'records', 'other', 'bad'} counts."""
        self._drop_file()
        self.refresh(full=True)
        counts = dict(self._run(lambda db: db.execute(
            "SELECT status, COUNT(*) FROM files GROUP BY status").fetchall()))
        self._name_bad(list(self._run(lambda db: db.execute(
            "SELECT name, mtime_ns, problem FROM files WHERE status = 'bad' ORDER BY name").fetchall())))
        return {"records": counts.get("record", 0), "other": counts.get("other", 0), "bad": counts.get("bad", 0)}

    # ------------------------------------------------------------------ reading
    def rows(self, *, protocol: str | None = None, fingerprint: str | None = None,
             model: str | None = None, records_only: bool = False) -> list[FileRow]:
        """The files (readable ones; records only with ``records_only`` or any filter), in
        file-name order, each checked against its file first; unreadable files are named."""
        if not self.folder.is_dir():
            return []
        listed = self.refresh()
        where, args = [], []
        for col, val in (("protocol", protocol), ("fingerprint", fingerprint), ("model", model)):
            if val is not None:
                where.append(f"{col} = ?")
                args.append(val)
        if records_only or where:
            where.append("status = 'record'")
        sql = "SELECT * FROM files" + (" WHERE " + " AND ".join(where) if where else "") + " ORDER BY name"
        found = [FileRow(*r) for r in self._run(lambda db: db.execute(sql, args).fetchall())]
        if not listed:
            found = self._checked(found)
        bad = [(r.name, r.mtime_ns, r.problem) for r in found if r.status == "bad"]
        self._name_bad(bad)
        return [r for r in found if r.status != "bad" and (r.status == "record" or not (records_only or where))]

    def records(self, **filters) -> Iterator[Any]:
        """The parsed files (see :meth:`rows`)."""
        for row in self.rows(**filters):
            yield json.loads(row.body)

    def _checked(self, found: list[FileRow]) -> list[FileRow]:
        """The rows whose file is still what was read; changed files read again, gone ones dropped."""
        out, stale, gone = [], [], []
        for r in found:
            try:
                st = os.stat(self.folder / r.name)
            except FileNotFoundError:
                gone.append(r.name)
                continue
            if (st.st_mtime_ns, st.st_size) == (r.mtime_ns, r.size):
                out.append(r)
                continue
            try:
                fresh = read_file_row(self.folder / r.name, st)
            except FileNotFoundError:
                gone.append(r.name)
                continue
            stale.append(fresh)
            if (fresh.protocol, fresh.fingerprint, fresh.model) == (r.protocol, r.fingerprint, r.model) \
                    or fresh.status == "bad":
                out.append(fresh)
        if stale or gone:
            def fix(db):
                db.execute("BEGIN IMMEDIATE")
                _upsert(db, stale, begun=True)
                db.executemany("DELETE FROM files WHERE name = ?", [(n,) for n in gone])
                db.execute("COMMIT")
            try:
                self._run(fix)
            except sqlite3.Error:
                pass  # the next look fixes it; what is served is already right
            for n in gone:
                self._name_once(n, 0, "gone", f"note: record file {self.folder / n} is gone; "
                                              "dropped from the records index")
        return sorted(out, key=lambda r: r.name)

    def _name_bad(self, bad: list[tuple[str, int, str | None]]) -> None:
        for name, mtime, why in bad:
            self._name_once(name, mtime, "bad", f"warning: {self.folder / name} is not a readable record "
                                                f"({why}); skipped, the other records are served")

    def _name_once(self, name: str, mtime: int, what: str, line: str) -> None:
        key = (str(self.folder.resolve()), name, mtime, what)
        if key not in _NAMED:
            _NAMED.add(key)
            self.warn(line)


def _upsert(db: sqlite3.Connection, rows: list[FileRow], begun: bool = False) -> None:
    if not rows:
        return
    sql = "INSERT OR REPLACE INTO files VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
    if begun:
        db.executemany(sql, [tuple(r.__dict__.values()) for r in rows])
        return
    db.execute("BEGIN IMMEDIATE")
    try:
        db.executemany(sql, [tuple(r.__dict__.values()) for r in rows])
        db.execute("COMMIT")
    except BaseException:
        db.execute("ROLLBACK")
        raise


_INDEXES: dict[tuple[int, str], RecordIndex] = {}
_KEEP_OPEN = 8  # folders whose index stays open in one process (tests make hundreds of folders)


def index_of(folder: str | Path) -> RecordIndex:
    """The index of a records folder, one per folder and process (the last few stay open)."""
    key = (os.getpid(), str(Path(folder).absolute()))
    index = _INDEXES.pop(key, None) or RecordIndex(folder)
    _INDEXES[key] = index  # most recently used last
    while len(_INDEXES) > _KEEP_OPEN:
        _INDEXES.pop(next(iter(_INDEXES))).close()
    return index


__all__ = ["SCHEMA_VERSION", "INDEX_DIR", "INDEX_FILE", "FileRow", "RecordIndex", "index_of", "is_record", "read_file_row"]
