"""Small file helpers shared by every writer: atomic writes and hashing."""
from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import socket
import tempfile
import time
from pathlib import Path
from typing import Any, Callable


def atomic_write(path: Path, write: Callable[[Path], None]) -> Path:
    """Call ``write(tmp_path)`` then rename onto ``path``, so readers never see half a file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    try:
        write(Path(tmp))
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def atomic_write_text(path: Path, text: str) -> Path:
    return atomic_write(path, lambda p: p.write_text(text))


def atomic_write_json(path: Path, obj: Any, strict: bool = False) -> Path:
    """``obj`` as indented JSON. ``strict``: NaN and Infinity, which strict parsers (JSON.parse,
    jq, most databases) refuse, are a ValueError naming where they are instead of bare tokens."""
    try:
        text = json.dumps(obj, indent=2, sort_keys=True, default=str, allow_nan=not strict)
    except ValueError:
        raise ValueError(f"{path}: not valid JSON: a non-finite number at {', '.join(non_finite_paths(obj))}; "
                         "write null (with its reason) instead") from None
    return atomic_write_text(path, text + "\n")


def non_finite_paths(obj: Any, where: str = "") -> list[str]:
    """The dotted paths of the NaN / Infinity floats inside ``obj`` (dicts, lists, tuples)."""
    import math

    if isinstance(obj, float):
        return [] if math.isfinite(obj) else [where or "(top)"]
    if isinstance(obj, dict):
        return [p for k, v in obj.items() for p in non_finite_paths(v, f"{where}.{k}" if where else str(k))]
    if isinstance(obj, (list, tuple)):
        return [p for i, v in enumerate(obj) for p in non_finite_paths(v, f"{where}[{i}]")]
    return []


def link_or_copy(src: Path, dst: Path) -> None:
    """``dst`` as a hard link to ``src`` (the same bytes, no space), a copy where the file system
    allows no link between them."""
    try:
        os.link(src, dst)
    except OSError:  # another file system, or links not allowed there
        shutil.copyfile(src, dst)


def sha256_file(path: Path, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


# ----------------------------------------------------------------------------- temp folders
# A writer that builds a folder under a temporary name and renames it into place (the
# feature cache) leaves the folder behind when it is killed (kill -9, OOM killer, a lost
# node). The owner file lets a later writer tell a dead owner's folder from a running one's.
OWNER_FILE = ".owner.json"
# ``.<hex key>.<mkdtemp suffix>``: nothing else in a cache folder (say a user's ``.git``) matches.
TEMPDIR_PATTERN = r"\.[0-9a-f]{16,}\.[A-Za-z0-9_]+"


def make_owned_tempdir(root: Path, prefix: str) -> Path:
    """``tempfile.mkdtemp(dir=root, prefix=prefix)`` with this process's host and pid inside."""
    tmp = Path(tempfile.mkdtemp(dir=root, prefix=prefix))
    (tmp / OWNER_FILE).write_text(json.dumps({"host": socket.gethostname(), "pid": os.getpid()}))
    return tmp


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    except (OSError, OverflowError):
        return False
    return True


def _process_start(pid: int) -> float | None:
    """Start time (epoch seconds) of a process, where /proc tells (Linux), else None."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        btime = next(int(ln.split()[1]) for ln in Path("/proc/stat").read_text().splitlines()
                     if ln.startswith("btime"))
        return btime + int(fields[19]) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, StopIteration):
        return None


def _owner_running(pid: int, since: float) -> bool:
    """Whether process ``pid``, which wrote its owner file at ``since``, still runs: alive, and
    not a newer process that reuses the number (started after the file was written)."""
    if not _pid_alive(pid):
        return False
    start = _process_start(pid)
    return start is None or start <= since + 2.0  # /proc times are in clock ticks, btime in s


def clean_stale_tempdirs(root: Path, pattern: str = TEMPDIR_PATTERN, max_age_hours: float = 24.0) -> list[Path]:
    """Remove the temp folders under ``root`` (names matching ``pattern``) of writers that
    died: the owner recorded inside ran on this host and is gone (or its pid now belongs to a
    process started later); or, with no owner readable (older versions) or another host's
    owner (which cannot be asked), the folder is older than ``max_age_hours``. A folder whose
    owner still runs is kept. Returns the removed folders."""
    name_re = re.compile(pattern)
    root = Path(root)
    if not root.is_dir():
        return []
    host, now = socket.gethostname(), time.time()
    removed = []
    for d in root.iterdir():
        try:
            if not name_re.fullmatch(d.name) or not d.is_dir() or d.is_symlink():
                continue
            try:
                owner_file = d / OWNER_FILE
                owner = json.loads(owner_file.read_text())
                pid = int(owner["pid"]) if owner.get("host") == host else None
                since = owner_file.stat().st_mtime
            except (OSError, ValueError, TypeError, KeyError):
                pid = None
            if pid is not None:
                stale = not _owner_running(pid, since)
            else:
                stale = now - d.stat().st_mtime > max_age_hours * 3600
        except OSError:  # removed meanwhile by another cleaner or its owner
            continue
        if stale:
            shutil.rmtree(d, ignore_errors=True)
            removed.append(d)
    return removed


# ----------------------------------------------------------------------------- folder locks
LOCK_FILE = ".lock"


class FolderLock:
    """An exclusive ``flock`` on ``<folder>/.lock``, held from :meth:`acquire` to :meth:`release`
    (or the holder's death: the kernel drops it with the process, so a killed run leaves no
    stale lock). The file records the holder (pid, host, start time) for the error another
    process gets. Advisory: it only keeps out writers that take it too."""

    def __init__(self, folder: Path, what: str = "run"):
        self.folder, self.what = Path(folder), what
        self.path = self.folder / LOCK_FILE
        self._fd: int | None = None

    def acquire(self) -> "FolderLock":
        import fcntl

        from harness.errors import FolderLockedError

        self.folder.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _describe_holder(os.read(fd, 4096))
            os.close(fd)
            raise FolderLockedError(
                f"{self.folder} is in use by another {self.what} ({holder}); wait for it to finish, "
                f"stop it, or use another output folder") from None
        except BaseException:
            os.close(fd)
            raise
        holder = {"pid": os.getpid(), "host": socket.gethostname(),
                  "started": time.strftime("%Y-%m-%d %H:%M:%S %z"), "what": self.what}
        os.ftruncate(fd, 0)
        os.write(fd, (json.dumps(holder) + "\n").encode())
        self._fd = fd
        return self

    def release(self) -> None:
        if self._fd is not None:
            os.ftruncate(self._fd, 0)  # the next reader finds no holder rather than a finished one
            os.close(self._fd)  # closing drops the flock
            self._fd = None

    def __enter__(self) -> "FolderLock":
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()


def _describe_holder(raw: bytes) -> str:
    try:
        h = json.loads(raw.decode())
        return f"pid {h['pid']} on host {h['host']}, started {h['started']}"
    except (ValueError, KeyError, TypeError, UnicodeDecodeError):
        return "a process that has not recorded itself yet"
