"""Writing a generated data set (SynthScenes and the protocols' own sets) once: into a temp
folder renamed into place, so an interrupted run never leaves half a data set, and with a
meta.json that says what is there, so the same request finds it and another one is refused."""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Callable

from harness.errors import DataError


def _same(path: Path, meta: dict) -> bool:
    try:
        return json.loads(path.read_text()) == json.loads(json.dumps(meta))
    except (OSError, ValueError):
        return False


def write_once(out_dir: str | Path, meta: dict, write: Callable[[Path], None]) -> Path:
    """``out_dir`` holding what ``write(folder)`` writes and ``meta`` as its meta.json: at once
    when it already holds that (another process may have written it), else written now. A folder
    with another meta.json, or not empty without one, is refused."""
    out = Path(out_dir).expanduser().resolve()
    if (out / "meta.json").is_file():
        if _same(out / "meta.json", meta):
            return out
        raise DataError(f"{out} holds another data set (see its meta.json); delete it or choose another folder")
    if out.exists() and any(out.iterdir()):
        raise DataError(f"{out} exists, is not empty and has no meta.json; choose an empty or new folder")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.parent / f".{out.name}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        tmp.mkdir()
        write(tmp)
        (tmp / "meta.json").write_text(json.dumps(meta, indent=1) + "\n")  # last: it marks the set complete
        if out.exists():
            out.rmdir()
        os.rename(tmp, out)
    except OSError:
        if _same(out / "meta.json", meta):  # another process finished the same set first
            return out
        raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out
