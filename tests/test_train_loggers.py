"""train.loggers: the engine fans every logged row out to jsonl, TensorBoard, W&B (offline)
and MLflow (local file store); each backend's numbers are read back and equal log.jsonl's.
Each optional backend's test skips with its reason when its package is absent."""
from __future__ import annotations

import copy
import importlib.util
import json
import struct
import sys
from pathlib import Path

import pytest

from harness.training.engine import TrainConfig, load_pretrain_config, pretrain
from harness.errors import ConfigError, MissingDependencyError
from tiny_recipes import TINY_DINO

OPTIONAL = [name for name in ("tensorboard", "wandb", "mlflow") if importlib.util.find_spec(name) is not None]
ROW_KEYS = {"step", "epoch", "lr", "wd", "momentum", "teacher_temp", "loss", "img_per_s", "step_s",
            "data_wait_share", "elapsed_s"}


@pytest.fixture(scope="module")
def tiny_data(synth_tiny):
    return synth_tiny  # the session's (read only here)


def _config(data: Path, loggers: list[str] | None):
    raw = copy.deepcopy(TINY_DINO)
    raw["data"] = {"root": str(data), "name": "tiny"}
    raw["train"].update(max_steps=3, log_every=1)
    if loggers is not None:
        raw["train"]["loggers"] = loggers
    return load_pretrain_config(raw, "<test>")


@pytest.fixture(scope="module")
def logged_run(tiny_data, tmp_path_factory):
    """One 3-step pretraining logging to jsonl and every optional backend installed here."""
    out = tmp_path_factory.mktemp("logged")
    mp = pytest.MonkeyPatch()
    mp.setenv("WANDB_MODE", "offline")  # no network: the run stays in <out>/wandb
    mp.setenv("WANDB_SILENT", "true")
    mp.delenv("MLFLOW_TRACKING_URI", raising=False)  # the local file store under <out>/mlruns
    try:
        pretrain(_config(tiny_data, ["jsonl"] + OPTIONAL), out, "<test>", progress=False)
    finally:
        mp.undo()
    rows = [json.loads(line) for line in (out / "log.jsonl").read_text().splitlines()]
    return out, rows


def test_jsonl_rows_carry_schedules_and_timings(logged_run):
    assert TrainConfig().loggers == ["jsonl"]  # the default
    _, rows = logged_run
    assert [r["step"] for r in rows] == [1, 2, 3]
    for r in rows:
        assert ROW_KEYS <= set(r), ROW_KEYS - set(r)
        assert r["teacher_temp"] == pytest.approx(0.04) and r["step_s"] > 0 and 0 <= r["data_wait_share"] <= 1


def _skip_unless(name: str) -> None:
    if name not in OPTIONAL:
        pytest.skip(f"{name} is not installed (pip install 'ssl-bench[{name}]'): its logger cannot be tested")


def test_tensorboard_event_files(logged_run):
    _skip_unless("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    out, rows = logged_run
    acc = EventAccumulator(str(out / "tensorboard"))
    acc.Reload()
    for key in ("loss", "lr", "teacher_temp", "img_per_s", "step_s"):
        events = acc.Scalars(f"train/{key}")
        assert [e.step for e in events] == [r["step"] for r in rows]
        assert [e.value for e in events] == pytest.approx([r[key] for r in rows], rel=1e-6, abs=1e-9)


def _wandb_records(path: Path):
    """The records of a W&B transaction log (.wandb: LevelDB-log framing of protobuf records,
    what `wandb sync` uploads later)."""
    from wandb.proto import wandb_internal_pb2 as pb

    data = path.read_bytes()
    assert data[:4] == b":W&B", data[:8]
    pos, block, buf = 7, 32768, b""
    while pos + 7 <= len(data):
        left = block - pos % block
        if left < 7:  # a block's tail too short for a header is padding
            pos += left
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos:pos + 7])
        if kind == 0 and length == 0:
            pos += left
            continue
        chunk = data[pos + 7:pos + 7 + length]
        pos += 7 + length
        buf = chunk if kind in (1, 2) else buf + chunk  # FULL / FIRST start a record
        if kind in (1, 4):  # FULL / LAST end it
            rec = pb.Record()
            rec.ParseFromString(buf)
            yield rec


def test_wandb_offline_run(logged_run):
    _skip_unless("wandb")
    out, rows = logged_run
    runs = list((out / "wandb").glob("offline-run-*/run-*.wandb"))
    assert len(runs) == 1
    history, config = [], {}
    for rec in _wandb_records(runs[0]):
        kind = rec.WhichOneof("record_type")
        if kind == "history":
            history.append({i.key or "/".join(i.nested_key): json.loads(i.value_json) for i in rec.history.item})
        elif kind in ("run", "config"):  # the run record holds the config given to wandb.init
            updates = rec.run.config.update if kind == "run" else rec.config.update
            config.update({i.key: json.loads(i.value_json) for i in updates})
    assert [h["_step"] for h in history] == [r["step"] for r in rows]
    for key in ("loss", "lr", "wd", "momentum", "teacher_temp", "step_s"):
        assert [h[f"train/{key}"] for h in history] == pytest.approx([r[key] for r in rows])
    assert config["train"]["loggers"] == ["jsonl"] + OPTIONAL and config["method"]["name"] == "dino"


def test_mlflow_local_file_store(logged_run):
    _skip_unless("mlflow")
    from mlflow.tracking import MlflowClient

    out, rows = logged_run
    client = MlflowClient(tracking_uri=(out / "mlruns").resolve().as_uri())
    exp = client.get_experiment_by_name("ssl-bench")
    (run,) = client.search_runs([exp.experiment_id])
    assert run.data.params["method.name"] == "dino" and run.data.params["train.max_steps"] == "3"
    for key in ("loss", "lr", "teacher_temp", "data_wait_share"):
        hist = sorted(client.get_metric_history(run.info.run_id, f"train/{key}"), key=lambda m: m.step)
        assert [m.step for m in hist] == [r["step"] for r in rows]
        assert [m.value for m in hist] == pytest.approx([r[key] for r in rows])


def test_missing_package_names_the_extra_before_the_first_step(tiny_data, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "wandb", None)  # as if not installed
    with pytest.raises(MissingDependencyError, match=r"pip install 'ssl-bench\[wandb\]'"):
        pretrain(_config(tiny_data, ["jsonl", "wandb"]), tmp_path / "o", "<test>", progress=False)
    assert not (tmp_path / "o" / "log.jsonl").exists() and not (tmp_path / "o" / "resume.pt").exists()


def test_unknown_logger_is_a_config_error(tiny_data, tmp_path):
    with pytest.raises(ConfigError, match="unknown logger.*'neptune'.*known: jsonl, tensorboard, wandb, mlflow"):
        pretrain(_config(tiny_data, ["jsonl", "neptune"]), tmp_path / "o", "<test>", progress=False)


def test_loggers_do_not_change_cached_checkpoint_keys(tiny_data):
    from harness.running.suite import ModelEntry
    from harness.training.cached_pretrain import checkpoint_plan

    plain = ModelEntry(name="dino", pretrain="methods/dino_cpu.yaml")
    logged = ModelEntry(name="dino", pretrain="methods/dino_cpu.yaml", set=["train.loggers=[jsonl,tensorboard]"])
    a, b = (checkpoint_plan(e, tiny_data, "tiny", "cpu") for e in (plain, logged))
    assert b[0].train.loggers == ["jsonl", "tensorboard"] and a[2] == b[2]
