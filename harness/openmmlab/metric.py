"""What the mmseg protocols register into mmseg's registries to read a run's numbers:

- ``SslBenchIoUMetric``: mmseg's IoUMetric that also writes the per-class table as CSV and each
  validation image's areas (per_image_io.py), for a bootstrap over the images;
- ``SslBenchValidationLog``: a hook that keeps every validation's metrics by iteration, in memory on
  every rank (the evaluator hands all ranks the same metrics) and, given a path, appended to a
  JSON-lines file on the main process, so that a resumed run still knows the validations of the
  interrupted runs before it (:func:`read_validation_log`).
"""
from __future__ import annotations

import csv
import json
from pathlib import Path

from harness.openmmlab.per_image_io import write_per_image

METRIC = "SslBenchIoUMetric"
VALIDATION_HOOK = "SslBenchValidationLog"
VALIDATION_LOG = "validations.jsonl"
_REGISTERED = False


def register_metric() -> None:
    """Register the metric and the validation hook (idempotent)."""
    global _REGISTERED
    if _REGISTERED:
        return
    from mmseg.evaluation import IoUMetric
    from mmseg.registry import METRICS

    class SslBenchIoUMetric(IoUMetric):
        def __init__(self, csv_path: str | None = None, per_image_path: str | None = None, **kwargs):
            super().__init__(**kwargs)
            self.csv_path = csv_path
            self.per_image_path = per_image_path

        def compute_metrics(self, results: list) -> dict:
            metrics = super().compute_metrics(results)
            if self.per_image_path:
                write_per_image(Path(self.per_image_path), results)
            if self.csv_path:
                write_class_table(Path(self.csv_path), results, self.dataset_meta["classes"])
            return metrics

    METRICS.register_module(name=METRIC, module=SslBenchIoUMetric, force=True)
    _register_validation_log()
    _REGISTERED = True


def write_class_table(path: Path, results: list, classes) -> None:
    """class, IoU, Acc (percent, two decimals; empty where undefined) and pixels of each class."""
    import numpy as np

    def pct(x) -> str:
        return "" if np.isnan(x) else f"{100 * float(x):.2f}"

    inter, union, pred, label = (sum(r[i] for r in results) for i in range(4))
    iou = (inter / union).cpu().numpy()
    acc = (inter / label).cpu().numpy()
    rows = [("class", "IoU", "Acc", "pixels")]
    for name, i, a, n in zip(classes, iou, acc, label.cpu().numpy()):
        rows.append((name, pct(i), pct(a), int(n)))
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as f:
        csv.writer(f).writerows(rows)


def _register_validation_log() -> None:
    from mmengine.dist import is_main_process
    from mmengine.hooks import Hook
    from mmengine.registry import HOOKS

    class SslBenchValidationLog(Hook):
        priority = "VERY_LOW"

        def __init__(self, path: str | None = None):
            self.path = Path(path) if path else None
            self.history: dict[int, dict[str, float]] = {}

        def after_val_epoch(self, runner, metrics=None) -> None:
            values = {k: round(float(v), 2) for k, v in (metrics or {}).items()
                      if isinstance(v, (int, float)) or getattr(v, "ndim", None) == 0}
            self.history[int(runner.iter)] = values
            if self.path is not None and is_main_process():
                self.path.parent.mkdir(parents=True, exist_ok=True)
                with open(self.path, "a") as f:
                    f.write(json.dumps({"iter": int(runner.iter), "metrics": values}) + "\n")

    HOOKS.register_module(name=VALIDATION_HOOK, module=SslBenchValidationLog, force=True)


def validation_history(runner) -> dict[int, dict[str, float]]:
    """{iteration: metrics} the runner's validation hook kept."""
    hook = next(h for h in runner.hooks if type(h).__name__ == VALIDATION_HOOK)
    return hook.history


def read_validation_log(path: Path) -> dict[int, dict[str, float]]:
    """{iteration: metrics} from a validation log (a later line for the same iteration wins)."""
    out: dict[int, dict[str, float]] = {}
    if Path(path).is_file():
        for line in Path(path).read_text().splitlines():
            if line.strip():
                entry = json.loads(line)
                out[int(entry["iter"])] = entry["metrics"]
    return out
