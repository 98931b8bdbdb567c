"""Result records: one JSON file per measured number set, written atomically and
never edited. A record's key is (model weights, protocol request, dataset, split, data
root and stamp, seed, variant); a run whose key already has a record is skipped unless
forced.

``load_results()`` is the Python API over the records: a tidy pandas DataFrame with one row
per number (docs/RESULTS.md)."""
from __future__ import annotations

import copy
import datetime as _dt
import json
import math
import platform
import socket
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Iterator

import harness
from harness.config import fingerprint
from harness.io_utils import atomic_write_json
from harness.results.index import index_of, is_number, is_record
from harness.paths import results_dir, source_checkout
from harness.variants import fraction_value, variant_label

if TYPE_CHECKING:
    import pandas as pd


def runs_dir() -> Path:
    return results_dir() / "runs"


def model_identity(model: dict) -> str:
    """Which weights a record measured: its ``weights_key`` (the verified checkpoint sha256, or
    the hash of a random init's tensors, so the init seed and overrides count). Records written
    before that field: the checkpoint sha256, else only the name."""
    return model.get("weights_key") or model.get("checkpoint_sha256") or model["name"]


def record_key(model: dict, protocol: dict, seed: int | None, variant: dict, device_type: str = "cpu") -> str:
    """Everything that changes the number: the weights, the protocol request (fingerprint and
    settings, precision included), the data (resolved root and stamp), dataset, split, seed,
    variant, and the kind of device that computed it (a GPU rounds otherwise than the CPU)."""
    return fingerprint({
        "model": model_identity(model),
        "model_name": model["name"],
        "protocol": protocol["name"], "fingerprint": protocol["fingerprint"],
        "request": protocol.get("request"),
        "dataset": protocol["dataset"], "split": protocol["split"],
        "data": {"root": protocol.get("data_root"), "stamp": protocol.get("data_stamp")},
        "seed": seed, "variant": variant,
        **({"device": device_type} if device_type != "cpu" else {}),  # CPU keys as before devices
    }, length=20)


def record_path(key: str, directory: Path | None = None) -> Path:
    return Path(directory or runs_dir()) / f"{key}.json"


def exists(key: str, directory: Path | None = None) -> bool:
    return record_path(key, directory).is_file()


def _git_state() -> tuple[str | None, bool | None]:
    # An installed package has no commit of its own; asking git from site-packages would record
    # the commit of whatever repository the environment happens to live in.
    checkout = source_checkout()
    if checkout is None:
        return None, None
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=checkout, capture_output=True,
                                text=True, timeout=10).stdout.strip() or None
        dirty = bool(subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                                    cwd=checkout, capture_output=True, text=True,
                                    timeout=10).stdout.strip())
        return commit, dirty
    except (OSError, subprocess.SubprocessError):
        return None, None


def provenance() -> dict[str, Any]:
    import timm
    import torch

    commit, dirty = _git_state()
    return {"harness_version": harness.__version__, "git_commit": commit, "dirty": dirty,
            "torch": torch.__version__, "timm": timm.__version__,
            "python": platform.python_version(), "host": socket.gethostname()}


def make_record(model: dict, protocol: dict, seed: int | None, variant: dict, metrics: dict,
                cost: dict, artifacts: dict | None = None, per_image: dict | None = None,
                metrics_undefined: dict[str, str] | None = None, flags: list[str] | None = None) -> dict[str, Any]:
    """A new record. ``per_image``: the per-evaluation-image statistics (harness.per_image) a
    bootstrap interval is computed from; kept as the record's ``per_image`` block, outside its key.
    A metric without a value (None, NaN or infinite) is ``null`` in ``metrics`` and its reason is
    in ``metrics_undefined`` (``metrics_undefined``: the protocol's reasons, by metric name)."""
    key = record_key(model, protocol, seed, variant, cost.get("device_type", "cpu"))
    metrics, undefined = defined_metrics(metrics, metrics_undefined)
    rec = {
        "id": key,
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "model": model, "protocol": protocol, "seed": seed, "variant": variant,
        "metrics": metrics, "cost": cost, "artifacts": artifacts or {},
        "provenance": provenance(),
    }
    if undefined:
        rec["metrics_undefined"] = undefined
    if flags:
        rec["flags"] = list(flags)  # what the numbers cannot say (a grid below the protocol's minimum)
    if per_image is not None:
        rec["per_image"] = per_image
    return rec


def defined_metrics(metrics: dict, reasons: dict[str, str] | None = None) -> tuple[dict, dict[str, str]]:
    """(metrics with every value that is not a finite number as None, {name: why it is None}):
    the protocol's reason where it gives one."""
    reasons = dict(reasons or {})
    out, undefined = {}, {}
    for name, value in metrics.items():
        number = isinstance(value, (int, float)) and not isinstance(value, bool)
        if value is None or (number and not math.isfinite(value)):
            out[name] = None
            undefined[name] = reasons.get(name) or f"not a finite number ({value!r})"
        else:
            out[name] = value
    return out, undefined


def write_record(record: dict, directory: Path | None = None, force: bool = False) -> Path | None:
    """Write a new record (and enter it in the folder's index); returns None (and writes
    nothing) if the key exists and not forced."""
    path = record_path(record["id"], directory)
    if path.exists() and not force:
        return None
    atomic_write_json(path, record, strict=True)  # JSON.parse, jq and databases refuse NaN
    index_of(path.parent).add(path)
    return path


def iter_records(directory: Path | None = None) -> Iterator[dict]:
    """Every readable JSON file of a records folder (default results/runs), in file-name order,
    served by the folder's index (harness.results.index); an unreadable file is named in one
    line and skipped."""
    yield from index_of(Path(directory or runs_dir())).records()


def find_records(directory: Path | None = None, *, protocol: str, fingerprint: str, model: str) -> list[dict]:
    """The records of one (protocol, fingerprint, model name), looked up in the folder's index:
    what skip-if-done reads, without reading the other records."""
    return list(index_of(Path(directory or runs_dir())).records(protocol=protocol, fingerprint=fingerprint,
                                                                model=model))


# ----------------------------------------------------------------------------- the DataFrame API
# The typed view: (column, where it comes from in a record, pandas dtype). Records written
# before a field existed give <NA> there.
FIELDS: list[tuple[str, tuple[str, ...], str]] = [
    ("record_id", ("id",), "string"),
    ("created", ("created",), "datetime64[ns, UTC]"),
    ("model", ("model", "name"), "string"),
    ("method", ("model", "method"), "string"),
    ("arch", ("model", "arch"), "string"),
    ("checkpoint_sha256", ("model", "checkpoint_sha256"), "string"),
    ("weights_key", ("model", "weights_key"), "string"),
    ("init_seed", ("model", "init_seed"), "Int64"),
    ("pretrain_data", ("model", "pretrain_data"), "string"),
    ("epochs", ("model", "epochs"), "Float64"),
    ("protocol", ("protocol", "name"), "string"),
    ("preset", ("protocol", "preset"), "string"),
    ("fingerprint", ("protocol", "fingerprint"), "string"),
    ("dataset", ("protocol", "dataset"), "string"),
    ("split", ("protocol", "split"), "string"),
    ("data_root", ("protocol", "data_root"), "string"),
    ("seed", ("seed",), "Int64"),
    ("variant", (), "string"),  # variant_label(record["variant"])
    ("fraction", ("variant", "fraction"), "Float64"),  # "1/8" -> 0.125
    ("k", ("variant", "k"), "Int64"),
    ("metric", (), "string"),  # one row per number in record["metrics"]
    ("value", (), "float64"),
    ("device", ("cost", "device"), "string"),
    ("device_type", ("cost", "device_type"), "string"),
    ("gpu", ("cost", "gpu"), "string"),
    ("precision", ("cost", "precision"), "string"),
    ("world_size", ("cost", "world_size"), "Int64"),
    ("wall_s", ("cost", "wall_s"), "Float64"),
    ("git_commit", ("provenance", "git_commit"), "string"),
    ("dirty", ("provenance", "dirty"), "boolean"),
]
TYPED_COLUMNS = [name for name, _, _ in FIELDS]
RAW_PREFIX = "rec."
# Record blocks whose keys become one raw column each; protocol.params one level deeper.
_BLOCKS = ("model", "protocol", "variant", "metrics", "cost", "artifacts", "provenance")
_NESTED = {("protocol", "params")}
_ABSENT = object()


def _raw_fields(rec: dict) -> dict[str, Any]:
    """Every field of a record under its path (``rec.model.name``, ``rec.protocol.params.k``,
    ``rec.cost.wall_s``), numbers of ``metrics`` excepted (they are the rows). An empty block
    keeps its own column (``rec.variant`` = {}), so that to_records() rebuilds it."""
    out: dict[str, Any] = {}
    for key, val in rec.items():
        if key in _BLOCKS and isinstance(val, dict):
            if not val:
                out[f"{RAW_PREFIX}{key}"] = {}
            for k2, v2 in val.items():
                if key == "metrics" and is_number(v2):
                    continue
                if (key, k2) in _NESTED and isinstance(v2, dict) and v2:
                    for k3, v3 in v2.items():
                        out[f"{RAW_PREFIX}{key}.{k2}.{k3}"] = v3
                else:
                    out[f"{RAW_PREFIX}{key}.{k2}"] = v2
        else:
            out[f"{RAW_PREFIX}{key}"] = val
    return out


def _get(rec: dict, path: tuple[str, ...]) -> Any:
    cur: Any = rec
    for p in path:
        if not isinstance(cur, dict) or p not in cur:
            return None
        cur = cur[p]
    return cur


def _as_int(v: Any) -> int | None:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return int(f) if f.is_integer() else None


def _typed_fields(rec: dict) -> dict[str, Any]:
    out = {}
    for name, path, dtype in FIELDS:
        v = _get(rec, path) if path else None
        if name == "record_id":
            v = v or fingerprint(rec, length=20)  # a record without an id still has an identity
        elif name == "variant":
            v = variant_label(rec.get("variant"))
        elif name == "fraction":
            v = fraction_value(v) if v is not None else None
        elif dtype == "Int64":
            v = _as_int(v) if v is not None else None
        elif dtype == "Float64":
            v = float(v) if is_number(v) else None
        elif dtype == "boolean":
            v = v if isinstance(v, bool) else None
        elif dtype == "string" and v is not None and not isinstance(v, str):
            v = str(v)
        out[name] = v
    return out


def _as_list(x: str | Iterable[str] | None) -> list[str] | None:
    if x is None:
        return None
    return [x] if isinstance(x, str) else list(x)


def _records_of(source: str | Path | Iterable[dict] | None) -> Iterator[dict]:
    if source is None or isinstance(source, (str, Path)):
        path = Path(source) if source is not None else None
        if path is not None and path.is_file():
            yield json.loads(path.read_text())
        else:
            yield from iter_records(path)
    else:
        yield from source


def load_results(source: str | Path | Iterable[dict] | None = None, *,
                 protocol: str | Iterable[str] | None = None, model: str | Iterable[str] | None = None,
                 fingerprint: str | Iterable[str] | None = None, dataset: str | Iterable[str] | None = None,
                 metric: str | Iterable[str] | None = None, headline: bool = False) -> "pd.DataFrame":
    """The result records as a tidy DataFrame: one row per number (a record's numeric metric).

    ``source``: a records folder (default ``results/runs``), one record file, or record dicts.
    Filters keep rows whose ``protocol`` / ``model`` / ``dataset`` / ``metric`` is the given
    name (or one of a list); ``fingerprint`` matches a full fingerprint or a prefix (the
    leaderboards show 8 hex digits); ``headline=True`` keeps each protocol's headline metric.

    Columns: the typed view ``TYPED_COLUMNS`` (see ``FIELDS``: model, method, arch,
    checkpoint_sha256, protocol, preset, fingerprint, dataset, split, fraction, k, seed,
    metric, value, device, wall_s, created, git_commit, ...), then every field of the record
    verbatim under its path, ``rec.model.name``, ``rec.protocol.params.k``, ``rec.cost.wall_s``,
    ... (<NA> where a record lacks the field). ``to_records(df)`` rebuilds the records;
    ``harness.results.leaderboard.pivot(df)`` is the leaderboard table of the rows. Made in one
    pass: each record read once (a folder's through its index), its fields repeated over its rows.
    """
    protocols, models, datasets, metrics = map(_as_list, (protocol, model, dataset, metric))
    fps = _as_list(fingerprint)
    kept: list[tuple[dict, dict, list]] = []  # per record: (typed fields, raw fields, its numbers)
    for rec in _records_of(source):
        if not is_record(rec):
            continue
        typed = _typed_fields(rec)
        if protocols is not None and typed["protocol"] not in protocols:
            continue
        if models is not None and typed["model"] not in models:
            continue
        if datasets is not None and typed["dataset"] not in datasets:
            continue
        if fps is not None and not any((typed["fingerprint"] or "").startswith(f) for f in fps if f):
            continue
        raw = _raw_fields(rec)
        numbers = [(m, float(v)) for m, v in (rec.get("metrics") or {}).items() if is_number(v)]
        if headline and numbers:
            from harness.protocol_info import headline_metric

            best = headline_metric(typed["protocol"], [m for m, _ in numbers])
            numbers = [(m, v) for m, v in numbers if m == best]
        if metrics is not None:
            numbers = [(m, v) for m, v in numbers if m in metrics]
            if not numbers:
                continue
        kept.append((typed, raw, numbers or [(None, float("nan"))]))  # a record without numbers keeps one row
    return _results_frame(kept, _folder_of(source))


def _results_frame(kept: list[tuple[dict, dict, list]], folder: Path | None) -> "pd.DataFrame":
    """The frame of load_results(), column by column: each record's fields repeated over its rows."""
    import pandas as pd

    counts = [len(numbers) for _, _, numbers in kept]
    repeat = lambda values: [v for v, k in zip(values, counts) for _ in range(k)]  # noqa: E731
    numbers = [n for _, _, ns in kept for n in ns]
    raw_cols = sorted({c for _, raw, _ in kept for c in raw}, key=_raw_order)
    data: dict[str, Any] = {}
    for name, _, dtype in FIELDS:
        if name in ("metric", "value"):
            values = [n[0 if name == "metric" else 1] for n in numbers]
        else:
            values = repeat([typed[name] for typed, _, _ in kept])
        if dtype.startswith("datetime"):
            data[name] = pd.to_datetime(pd.Series(values, dtype=object), utc=True, errors="coerce",
                                        format="ISO8601").astype(dtype)
        else:
            data[name] = pd.Series(values, dtype=dtype)
    for c in raw_cols:  # object columns: a stored null stays None, an absent field is <NA>
        data[c] = pd.Series(repeat([raw.get(c, pd.NA) for _, raw, _ in kept]), dtype=object)
    frame = pd.DataFrame(data, columns=TYPED_COLUMNS + raw_cols)
    if folder is not None:  # where its records are: the report reads them there (harness.results.report)
        frame.attrs["records_folder"] = str(folder)
    return frame


def _folder_of(source: str | Path | Iterable[dict] | None) -> Path | None:
    if source is not None and not isinstance(source, (str, Path)):
        return None
    path = Path(source) if source is not None else runs_dir()
    return path if path.is_dir() else None


def _raw_order(col: str) -> tuple:
    top = col[len(RAW_PREFIX):].split(".", 1)[0]
    order = ["id", "created"] + list(_BLOCKS[:2]) + ["seed"] + list(_BLOCKS[2:])
    return (order.index(top) if top in order else len(order), col)


def to_records(df: "pd.DataFrame") -> list[dict]:
    """The records of a load_results() frame (its rows' metrics only, if rows were dropped):
    ``to_records(load_results(d)) == list of the records in d``."""
    import pandas as pd

    raw_cols = [c for c in df.columns if str(c).startswith(RAW_PREFIX)]
    if not raw_cols:
        raise ValueError("to_records needs the rec.* columns of load_results(); this frame has none")
    out: list[dict] = []
    for _, grp in df.groupby("record_id", sort=False, dropna=False):
        first = grp.iloc[0]
        rec: dict[str, Any] = {}
        for c in sorted(raw_cols, key=lambda c: c.count(".")):  # empty blocks before their keys
            v = first[c]
            if v is pd.NA:
                continue
            v = copy.deepcopy(v)  # the frame's values stay the frame's
            path = c[len(RAW_PREFIX):]
            top, _, rest = path.partition(".")
            if not rest:
                rec[top] = v
                continue
            block = rec.setdefault(top, {})
            nested = next((k2 for (k1, k2) in _NESTED if k1 == top and rest.startswith(k2 + ".")), None)
            if nested is not None:
                block.setdefault(nested, {})[rest[len(nested) + 1:]] = v
            else:
                block[rest] = v
        for m, v in zip(grp["metric"], grp["value"]):
            if m is not pd.NA and m is not None:
                rec.setdefault("metrics", {})[m] = float(v)
        out.append(rec)
    return out


# ----------------------------------------------------------------------------- CLI
def add_cli(subparsers) -> None:
    r = subparsers.add_parser("records", help="the result records' index (SQLite beside the JSON files)")
    rs = r.add_subparsers(dest="records_command", required=True)
    ri = rs.add_parser("reindex", help="rebuild the index of a records folder from its files")
    ri.add_argument("--runs", default=None, help="records folder (default results/runs)")
    ri.set_defaults(func=cmd_reindex)


def cmd_reindex(args) -> int:
    import time

    from harness.errors import ConfigError
    from harness.results.index import RecordIndex

    folder = Path(args.runs) if args.runs else runs_dir()
    if not folder.is_dir():
        raise ConfigError(f"records folder {folder} does not exist; give --runs DIR (a folder of result records)")
    t0 = time.perf_counter()
    index = RecordIndex(folder)
    counts = index.reindex()
    where = "in memory (the folder is not writable)" if index.in_memory else str(index.path)
    print(f"indexed {counts['records']} records ({counts['other']} other JSON files, {counts['bad']} unreadable) "
          f"of {folder} in {time.perf_counter() - t0:.1f} s: {where}")
    return 0
