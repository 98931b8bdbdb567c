"""Result records: one JSON file per measured number set, written atomically and
never edited. A record's key is (model weights, protocol request, dataset, split, data
root and stamp, seed, variant); a run whose key already has a record is skipped unless
forced."""
from __future__ import annotations

import datetime as _dt
import json
import platform
import socket
import subprocess
from pathlib import Path
from typing import Any, Iterator

import harness
from harness.config import fingerprint
from harness.io_utils import atomic_write_json
from harness.paths import REPO_ROOT, results_dir


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
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO_ROOT, capture_output=True,
                                text=True, timeout=10).stdout.strip() or None
        dirty = bool(subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                                    cwd=REPO_ROOT, capture_output=True, text=True,
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
                cost: dict, artifacts: dict | None = None) -> dict[str, Any]:
    key = record_key(model, protocol, seed, variant, cost.get("device_type", "cpu"))
    return {
        "id": key,
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "model": model, "protocol": protocol, "seed": seed, "variant": variant,
        "metrics": metrics, "cost": cost, "artifacts": artifacts or {},
        "provenance": provenance(),
    }


def write_record(record: dict, directory: Path | None = None, force: bool = False) -> Path | None:
    """Write a new record; returns None (and writes nothing) if the key exists and not forced."""
    path = record_path(record["id"], directory)
    if path.exists() and not force:
        return None
    return atomic_write_json(path, record)


def iter_records(directory: Path | None = None) -> Iterator[dict]:
    d = Path(directory or runs_dir())
    if not d.is_dir():
        return
    for p in sorted(d.glob("*.json")):
        try:
            yield json.loads(p.read_text())
        except json.JSONDecodeError:
            continue  # a foreign or damaged file is not a record
