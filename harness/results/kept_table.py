"""A records folder's grouped table, kept beside its index.

Grouping a folder's numbers into cells (harness.results.run_table.table_of_numbers) reads every
number row of the index and groups them; of a folder whose records have not changed, the result
is the same. It is kept in the index's folder, keyed by every served record file's name and
stamp (mtime, size) and by the grouping code itself: a record added, removed or rewritten, or
another version of the code, gives another key, and the table is grouped again. What is kept is
the grouping's output (names, column keys, the mean / std / n arrays, model facts, fingerprint
conflicts, which cells have per-image statistics and their bootstrap intervals; the conflicts'
messages are worded again on reading), as JSON and a NumPy archive: no pickle, nothing that runs
code when read. A kept file that cannot be read is grouped again and rewritten.
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import numpy as np

from harness.io_utils import atomic_write, atomic_write_text

FORMAT = 3  # bump when table_of_numbers' output changes meaning (2: with the bootstrap intervals; 3: readings)
STEM = f"table-v{FORMAT}"


# the code whose output is kept: another version of it groups again
_GROUPING_CODE = ("run_table.py", "table.py", "kept_table.py", "bootstrap.py", "../variants.py")


def records_key(stamps: dict[str, tuple[int, int]]) -> str:
    """The identity of a set of record files (their names and stamps, in name order) grouped
    by this version of the grouping code."""
    digest = hashlib.sha256(f"format {FORMAT}\n".encode())
    here = Path(__file__).parent
    for name in _GROUPING_CODE:
        digest.update(hashlib.sha256((here / name).read_bytes()).digest())
    for name in sorted(stamps):
        mtime, size = stamps[name]
        digest.update(f"{name}\t{mtime}\t{size}\n".encode())
    return digest.hexdigest()


def load(folder: Path, key: str) -> dict[str, Any] | None:
    """The table kept under ``key`` in ``folder`` (run_table.RunTable's fields but ``messages``
    and ``source``, and its bootstrap intervals as the arrays of RunTable.intervals),
    or None when none is kept, another set of records was, or the files cannot be read."""
    try:
        meta = json.loads((folder / f"{STEM}.json").read_text())
        if meta.get("key") != key:
            return None
        with np.load(folder / f"{STEM}.npz", allow_pickle=False) as arrays:
            if str(arrays["key"]) != key:  # the two files were written by different calls
                return None
            mean, std, n = arrays["mean"], arrays["std"], arrays["n"]
            cells, bounds, how = arrays["boot_cells"], arrays["boot_bounds"], arrays["boot_how"]
        per_image = {(int(i), int(j)): (rid, file) for i, j, rid, file in meta["per_image"]}
        return dict(models=meta["models"], keys=[tuple(k) for k in meta["keys"]], mean=mean, std=std, n=n,
                    model_info=meta["model_info"], conflicts=meta["conflicts"],
                    per_image=per_image, intervals=(cells, bounds, how))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def keep(folder: Path, key: str, table) -> None:
    """Keep ``table`` (a RunTable, its bootstrap intervals computed here) under ``key``; best
    effort: a folder that cannot be written keeps nothing, and the next call groups again."""
    meta = dict(key=key, models=list(table.models), keys=[list(k) for k in table.keys], model_info=table.model_info,
                conflicts=table.conflicts,
                per_image=[[i, j, rid, file] for (i, j), (rid, file) in table.per_image.items()])
    cells, bounds, how = table.intervals
    intervals = dict(boot_cells=cells, boot_bounds=bounds, boot_how=how)
    try:
        text = json.dumps(meta)
    except TypeError:  # a model fact JSON cannot hold: group again next time
        return
    try:
        folder.mkdir(parents=True, exist_ok=True)
        def write_arrays(path: Path) -> None:
            with open(path, "wb") as f:  # a file object: savez would add ".npz" to the temp name
                np.savez(f, key=np.array(key), mean=table.mean, std=table.std, n=table.n, **intervals)

        atomic_write(folder / f"{STEM}.npz", write_arrays)
        atomic_write_text(folder / f"{STEM}.json", text)
    except OSError:
        pass


__all__ = ["FORMAT", "records_key", "load", "keep"]
