"""Where pretraining logs go: ``train.loggers: [jsonl, tensorboard, wandb, mlflow]``.

The engine builds one ``TrainLoggers`` (rank 0 only) and hands it every logged row: a dict
with ``step``, ``epoch``, ``lr``, ``wd``, ``momentum``, the losses, the methods' schedules
(e.g. ``teacher_temp``), ``img_per_s``, ``step_s``, ``data_wait_share`` and ``elapsed_s``.
Each backend writes the row's numbers as scalars at its ``step``:

- ``jsonl``: ``<out>/log.jsonl``, one JSON row per line (the default; resume truncates it
  to the checkpoint's step, and the tests and scripts read it);
- ``tensorboard``: event files under ``<out>/tensorboard`` (``torch.utils.tensorboard``,
  needs the ``tensorboard`` package: ``pip install 'ssl-bench[tensorboard]'``);
- ``wandb``: a Weights & Biases run in ``<out>/wandb``; project ``$WANDB_PROJECT`` or
  ``ssl-bench``; ``WANDB_MODE=offline`` logs without network (``ssl-bench[wandb]``);
- ``mlflow``: an MLflow run in ``$MLFLOW_TRACKING_URI``, else the local file store
  ``<out>/mlruns`` (allowed through ``MLFLOW_ALLOW_FILE_STORE``, which MLflow 3 asks for);
  experiment ``$MLFLOW_EXPERIMENT_NAME`` or ``ssl-bench`` (``ssl-bench[mlflow]``).

The three optional packages are imported only when their logger is asked for; a missing one
is a MissingDependencyError naming the extra to install, raised before the first step.
"""
from __future__ import annotations

import importlib
import json
import os
from pathlib import Path
from typing import Any, Callable, ClassVar

from harness.errors import ConfigError, MissingDependencyError

DEFAULT_LOGGERS = ["jsonl"]


def _require(module: str, logger: str, extra: str):
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise MissingDependencyError(
            f"train.loggers asks for {logger!r}, which needs the {module.split('.')[0]!r} package "
            f"({exc}); install it with: pip install 'ssl-bench[{extra}]' (or drop {logger!r} from "
            f"train.loggers)") from exc


def scalars(row: dict[str, Any]) -> dict[str, float]:
    """The row's numbers other than the step (booleans and text are not scalars)."""
    return {k: float(v) for k, v in row.items()
            if k != "step" and isinstance(v, (int, float)) and not isinstance(v, bool)}


class TrainLogger:
    """One backend: ``log(row)`` for every logged step, ``close()`` once at the end."""

    name: ClassVar[str] = "?"

    def log(self, row: dict[str, Any]) -> None:
        raise NotImplementedError

    def close(self) -> None:
        pass


class JsonlLogger(TrainLogger):
    name = "jsonl"

    def __init__(self, out_dir: Path, run_name: str, config: dict[str, Any]):
        self.path = Path(out_dir) / "log.jsonl"

    def log(self, row: dict[str, Any]) -> None:
        with open(self.path, "a") as f:
            f.write(json.dumps(row) + "\n")


class TensorBoardLogger(TrainLogger):
    name = "tensorboard"

    def __init__(self, out_dir: Path, run_name: str, config: dict[str, Any]):
        _require("tensorboard", self.name, "tensorboard")
        from torch.utils.tensorboard import SummaryWriter

        self.writer = SummaryWriter(log_dir=str(Path(out_dir) / "tensorboard"))
        self.writer.add_text("config", "```\n" + json.dumps(config, indent=1, default=str) + "\n```", 0)

    def log(self, row: dict[str, Any]) -> None:
        for k, v in scalars(row).items():
            self.writer.add_scalar(f"train/{k}", v, row["step"])

    def close(self) -> None:
        self.writer.close()


class WandbLogger(TrainLogger):
    name = "wandb"

    def __init__(self, out_dir: Path, run_name: str, config: dict[str, Any]):
        self.wandb = _require("wandb", self.name, "wandb")
        self.run = self.wandb.init(project=os.environ.get("WANDB_PROJECT", "ssl-bench"), name=run_name,
                                   dir=str(out_dir), config=config, reinit="finish_previous")

    def log(self, row: dict[str, Any]) -> None:
        self.run.log({f"train/{k}": v for k, v in scalars(row).items()}, step=int(row["step"]))

    def close(self) -> None:
        self.run.finish()


class MlflowLogger(TrainLogger):
    name = "mlflow"

    def __init__(self, out_dir: Path, run_name: str, config: dict[str, Any]):
        mlflow = self.mlflow = _require("mlflow", self.name, "mlflow")
        if not os.environ.get("MLFLOW_TRACKING_URI"):
            # MLflow 3 keeps the file store in maintenance mode and refuses it unless told: the
            # local store needs no server and no database package, which is why it is the default
            os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
            mlflow.set_tracking_uri((Path(out_dir).resolve() / "mlruns").as_uri())
        mlflow.set_experiment(os.environ.get("MLFLOW_EXPERIMENT_NAME", "ssl-bench"))
        self.run = mlflow.start_run(run_name=run_name)
        mlflow.log_params(_flat_params(config))

    def log(self, row: dict[str, Any]) -> None:
        self.mlflow.log_metrics({f"train/{k}": v for k, v in scalars(row).items()}, step=int(row["step"]))

    def close(self) -> None:
        self.mlflow.end_run()


def _flat_params(config: dict[str, Any], prefix: str = "") -> dict[str, str]:
    """``{"train": {"lr": 5e-4}}`` -> ``{"train.lr": "0.0005"}`` (MLflow params are flat text)."""
    out = {}
    for k, v in config.items():
        if isinstance(v, dict):
            out.update(_flat_params(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = str(v)[:500]  # MLflow's limit on a param value
    return out


LOGGERS: dict[str, Callable[[Path, str, dict], TrainLogger]] = {
    cls.name: cls for cls in (JsonlLogger, TensorBoardLogger, WandbLogger, MlflowLogger)}


def check_names(names: list[str], source: str = "train.loggers") -> None:
    unknown = [n for n in names if n not in LOGGERS]
    if unknown:
        raise ConfigError(f"{source}: unknown logger(s) {unknown}; known: {', '.join(LOGGERS)}")


class TrainLoggers:
    """All the backends a run asked for, behind the one ``log`` / ``close`` the engine calls."""

    def __init__(self, names: list[str], out_dir: Path, run_name: str, config: dict[str, Any]):
        check_names(names)
        self.loggers: list[TrainLogger] = []
        try:
            for name in dict.fromkeys(names):
                self.loggers.append(LOGGERS[name](Path(out_dir), run_name, config))
        except BaseException:
            self.close()
            raise

    def log(self, row: dict[str, Any]) -> None:
        for logger in self.loggers:
            logger.log(row)

    def close(self) -> None:
        for logger in self.loggers:
            logger.close()
        self.loggers = []
