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

SCHEMA_VERSION = 5  # 3: the numbers table (one row per number of a record); 4: the parts table; 5: readings
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
    reading TEXT,               -- how a record's model was read (model_reading); before body: read without it
    body TEXT                   -- the file's text ('record' and 'other')
);
CREATE INDEX IF NOT EXISTS files_by_run ON files (protocol, fingerprint, model);
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT);
-- one row per number of a record (record_numbers): what the tables group, read without the JSON
CREATE TABLE IF NOT EXISTS numbers (
    name TEXT NOT NULL, pos INTEGER NOT NULL, record_id TEXT, model TEXT, sha TEXT, method TEXT, context TEXT,
    arch TEXT, pretrain_data TEXT, epochs REAL, protocol TEXT, dataset TEXT, split TEXT, variant TEXT,
    metric TEXT, fingerprint TEXT, seed INTEGER, created REAL, data TEXT, value REAL, per_image INTEGER,
    PRIMARY KEY (name, pos)
) WITHOUT ROWID;  -- stored in (name, pos) order: read in that order without a look-up per row
-- one row per part of a record without a number (a null metric, a flag: pair_status.record_parts)
CREATE TABLE IF NOT EXISTS parts (
    name TEXT NOT NULL, pos INTEGER NOT NULL, model TEXT, protocol TEXT, preset TEXT, state TEXT, reason TEXT,
    PRIMARY KEY (name, pos)
) WITHOUT ROWID;
-- what rows(body=False) reads, without touching the pages that hold the files' text
CREATE INDEX IF NOT EXISTS files_stamps ON files (status, name, mtime_ns, size, problem, protocol, fingerprint, model);
"""
# The fields of a number row, in the numbers table's order after (name, pos): what a table
# groups by (harness.results.run_table.table_of_numbers).
NUMBER_FIELDS = ("record_id", "model", "sha", "method", "context", "arch", "pretrain_data", "epochs", "protocol",
                 "dataset", "split", "variant", "metric", "fingerprint", "seed", "created", "data", "value",
                 "per_image")


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
    numbers: tuple = ()  # record_numbers of a record: not a column of the files table
    parts: tuple = ()  # its parts without a number (harness.results.pair_status.record_parts): nor this
    reading: str | None = None  # model_reading of a record's model block: a column, not read with the rows


def model_reading(model: dict) -> str:
    """How a record's model was read: its source, input normalisation and readout (layers,
    pooling, prefix tokens), from the adapter block; ssl-bench's own ViTs say so."""
    a = model.get("adapter")
    if not isinstance(a, dict):
        regs = int(model.get("reg_tokens") or 0)
        what = model.get("context") if model.get("context") in ("pixels", "chance") else "ssl-bench ViT"
        return (f"{what} {model.get('arch')} · ImageNet mean/std · [CLS] and patch tokens of the last blocks"
                f"{f', {regs} register tokens' if regs else ''}, stride {model.get('patch_size')}")
    norm = a.get("input_norm")
    if a.get("norm_source"):
        norm = f"{norm} ({a['norm_source']})"
    readout = ", ".join(f"{k.replace('_', ' ')} {a[k]}" for k in ("layers", "pooling", "prefix_tokens") if k in a)
    return f"{model.get('spec') or a.get('adapter')} · {norm} · {readout}, stride {a.get('stride')}"


def is_number(value: Any) -> bool:
    """A metric value that is a number row: an int or float, not a bool."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def weights_label(model: dict) -> str:
    """The weights a record's model block names, as the tables label them: ``weights_key``, else
    the checkpoint sha256, without ``weights-``; "" where neither is given."""
    return str(model.get("weights_key") or model.get("checkpoint_sha256") or "").removeprefix("weights-")


def record_numbers(rec: dict) -> list[tuple]:
    """One tuple per number of a record (fields ``NUMBER_FIELDS``), as the tables read it: the
    weights label (``weights_key``, else the checkpoint sha256, without ``weights-``), the
    context kind, "" for a missing dataset, split, variant or fingerprint, the data label (its
    stamp, else its root), ``created`` in seconds (None when absent or unreadable) and whether
    the record keeps per-image statistics. Numbers that are not int or float are no rows."""
    from harness.context import context_kind
    from harness.variants import variant_label

    model, proto = rec["model"], rec["protocol"]
    numbers = [(m, float(v)) for m, v in (rec.get("metrics") or {}).items() if is_number(v)]
    if not numbers:
        return []
    rid = rec.get("id")
    if not rid:
        from harness.config import fingerprint

        rid = fingerprint(rec, length=20)  # a record without an id still has an identity
    text = lambda v: None if v is None else str(v)  # noqa: E731
    epochs = model.get("epochs")
    data = proto.get("data_stamp") if proto.get("data_stamp") is not None else proto.get("data_root")
    head = (str(rid), str(model["name"]), weights_label(model), text(model.get("method")),
            context_kind({k: model[k] for k in ("context", "method") if k in model}), text(model.get("arch")),
            text(model.get("pretrain_data")),
            float(epochs) if isinstance(epochs, (int, float)) and not isinstance(epochs, bool) else None,
            str(proto["name"]), text(proto.get("dataset")) or "", text(proto.get("split")) or "",
            variant_label(rec.get("variant")) or "")
    tail = (text(proto.get("fingerprint")) or "", _seed(rec.get("seed")), _seconds(rec.get("created")),
            "" if data is None else str(data))
    flag = int(rec.get("per_image") is not None)
    return [head + (m,) + tail + (v, flag) for m, v in numbers]


def _seed(v: Any) -> int | None:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return int(f) if f.is_integer() else None


def _seconds(created: Any) -> float | None:
    """An ISO 8601 time in seconds since the epoch (no zone: UTC), the newest-record order."""
    import datetime as dt

    try:
        t = dt.datetime.fromisoformat(str(created))
    except (TypeError, ValueError):
        return None
    return (t if t.tzinfo else t.replace(tzinfo=dt.timezone.utc)).timestamp()


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
    from harness.results.pair_status import record_parts

    proto, model = obj["protocol"], obj["model"]
    fp = proto.get("fingerprint")
    return FileRow(path.name, st.st_mtime_ns, st.st_size, "record", None, str(proto["name"]),
                   None if fp is None else str(fp), str(model["name"]), text, tuple(record_numbers(obj)),
                   tuple(record_parts(obj)), model_reading(model))


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
        for old in self.path.parent.glob("records-v*.sqlite*"):  # an older schema's index: rebuilt as ours
            if not old.name.startswith(self.path.name):
                old.unlink(missing_ok=True)
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
            _delete(db, gone)
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
             model: str | None = None, records_only: bool = False, body: bool = True) -> list[FileRow]:
        """The files (readable ones; records only with ``records_only`` or any filter), in
        file-name order, each checked against its file first; unreadable files are named.
        ``body=False``: without the files' text (None), for readers of the numbers alone."""
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
        what = "name, mtime_ns, size, status, problem, protocol, fingerprint, model, " + ("body" if body else "NULL")
        sql = f"SELECT {what} FROM files" + (" WHERE " + " AND ".join(where) if where else "") + " ORDER BY name"
        found = [FileRow(*r) for r in self._run(lambda db: db.execute(sql, args).fetchall())]
        if not listed:
            found = self._checked(found)
        bad = [(r.name, r.mtime_ns, r.problem) for r in found if r.status == "bad"]
        self._name_bad(bad)
        return [r for r in found if r.status != "bad" and (r.status == "record" or not (records_only or where))]

    def served(self) -> list[FileRow]:
        """The readable records' rows without their text, checked as :meth:`rows` checks them."""
        return self.rows(records_only=True, body=False)

    def numbers(self, served: list[FileRow] | None = None) -> tuple[list[tuple], dict[str, tuple[int, int]]]:
        """(rows, stamps): every readable record's numbers as (file name, ``NUMBER_FIELDS``...),
        in file-name then metric order, read from the index without parsing a record; and each
        served file's (mtime_ns, size). Files are checked as :meth:`rows` checks them (or
        ``served``: :meth:`served` of a moment ago)."""
        served = self.served() if served is None else served
        stamps = {r.name: (r.mtime_ns, r.size) for r in served}
        fresh = {r.name: r.numbers for r in served if r.body is not None}  # read again just now: in hand
        sql = f"SELECT name, {', '.join(NUMBER_FIELDS)} FROM numbers ORDER BY name, pos"
        rows = self._run(lambda db: db.execute(sql).fetchall())
        if fresh or not stamps.keys() >= {r[0] for r in rows}:  # files changed or gone since they were read
            rows = [r for r in rows if r[0] in stamps and r[0] not in fresh]
        if fresh:
            rows += [(name, *n) for name, numbers in fresh.items() for n in numbers]
            rows.sort(key=lambda r: r[0])  # stable: each file's numbers keep their order
        return rows, stamps

    def parts(self, served: list[FileRow]) -> list[tuple]:
        """The parts without a number (harness.results.pair_status.record_parts) of the records
        ``served`` (:meth:`served` of a moment ago), in file-name order, read from the index."""
        names = {r.name for r in served}
        fresh = {r.name: r.parts for r in served if r.body is not None}
        sql = "SELECT name, model, protocol, preset, state, reason FROM parts ORDER BY name, pos"
        rows = [r for r in self._run(lambda db: db.execute(sql).fetchall()) if r[0] in names and r[0] not in fresh]
        rows += [(name, *part) for name, parts in fresh.items() for part in parts]
        rows.sort(key=lambda r: r[0])  # stable: each file's parts keep their order
        return [r[1:] for r in rows]

    def readings(self, names: list[str]) -> dict[str, str]:
        """{file name: how its record's model was read} of the indexed records ``names``: one
        look-up each by name, reading no file's text."""
        out: dict[str, str] = {}
        names = list(dict.fromkeys(names))
        for start in range(0, len(names), 500):  # under SQLite's limit of bound parameters
            chunk = names[start:start + 500]
            sql = f"SELECT name, reading FROM files WHERE name IN ({', '.join('?' * len(chunk))})"
            out.update((n, r) for n, r in self._run(lambda db: db.execute(sql, chunk).fetchall()) if r is not None)
        return out

    def record(self, name: str) -> Any:
        """The parsed record of one indexed file (None when the index holds no text of it)."""
        found = self._run(lambda db: db.execute("SELECT body FROM files WHERE name = ?", (name,)).fetchone())
        if found is None or found[0] is None:
            return None
        return json.loads(found[0])

    def records(self, **filters) -> Iterator[Any]:
        """The parsed files (see :meth:`rows`)."""
        for row in self.rows(**filters):
            yield json.loads(row.body)

    def _checked(self, found: list[FileRow]) -> list[FileRow]:
        """The rows whose file is still what was read; changed files read again, gone ones dropped."""
        out, stale, gone = [], [], []
        folder = os.open(self.folder, os.O_RDONLY)  # stat by name in the folder: no path built per file
        try:
            stats = [_stat_in(folder, r.name) for r in found]
        finally:
            os.close(folder)
        for r, st in zip(found, stats):
            if st is None:
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
                _delete(db, gone)
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


def _stat_in(folder: int, name: str) -> os.stat_result | None:
    try:
        return os.stat(name, dir_fd=folder)
    except FileNotFoundError:
        return None


def _delete(db: sqlite3.Connection, names: list[str]) -> None:
    db.executemany("DELETE FROM files WHERE name = ?", [(n,) for n in names])
    db.executemany("DELETE FROM numbers WHERE name = ?", [(n,) for n in names])
    db.executemany("DELETE FROM parts WHERE name = ?", [(n,) for n in names])


def _write_rows(db: sqlite3.Connection, rows: list[FileRow]) -> None:
    """The files' rows and their numbers, replacing what the index held of those files."""
    db.executemany("INSERT OR REPLACE INTO files VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                   [(r.name, r.mtime_ns, r.size, r.status, r.problem, r.protocol, r.fingerprint, r.model, r.reading,
                     r.body) for r in rows])
    db.executemany("DELETE FROM numbers WHERE name = ?", [(r.name,) for r in rows])
    marks = ", ".join("?" * (2 + len(NUMBER_FIELDS)))
    db.executemany(f"INSERT INTO numbers VALUES ({marks})",
                   [(r.name, pos, *number) for r in rows for pos, number in enumerate(r.numbers)])
    db.executemany("DELETE FROM parts WHERE name = ?", [(r.name,) for r in rows])
    db.executemany("INSERT INTO parts VALUES (?, ?, ?, ?, ?, ?, ?)",
                   [(r.name, pos, *part) for r in rows for pos, part in enumerate(r.parts)])


def _upsert(db: sqlite3.Connection, rows: list[FileRow], begun: bool = False) -> None:
    if not rows:
        return
    if begun:
        _write_rows(db, rows)
        return
    db.execute("BEGIN IMMEDIATE")
    try:
        _write_rows(db, rows)
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


__all__ = ["SCHEMA_VERSION", "INDEX_DIR", "INDEX_FILE", "NUMBER_FIELDS", "FileRow", "RecordIndex", "index_of",
           "is_number", "is_record", "model_reading", "read_file_row", "record_numbers", "weights_label"]
