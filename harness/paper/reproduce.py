"""`ssl-bench reproduce` and `ssl-bench paper`: regenerate a paper table from zoo checkpoints.

``reproduce(table, data_root, zoo_dir)`` runs, for every (zoo checkpoint, protocol, dataset)
the table needs (harness.paper.plan), the registered protocol through ``harness.running.evaluate``
(so the result records land in results/runs and feed the leaderboards), then prints
measured / paper / delta side by side with the seed spread and a verdict per cell
(harness.paper.verdict). ``dry_run=True`` prints the plan only: checkpoints, protocols,
datasets, FLOPs and GPU-hours.
"""
from __future__ import annotations

import sys
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import pandas as pd

from harness.running.device import DEVICE_HELP
from harness.errors import CheckpointError, SslBenchError
from harness.paper.gpus import DEFAULT_GPU, DEFAULT_PRECISION, GpuChoice
from harness.paper.plan import Job, format_plan, job_values, plan
from harness.paper.spec import Table, list_tables, paper_numbers
from harness.paper.verdict import compare_cells, exit_status, format_comparison, tolerance_lines
from harness.paths import default_zoo_dir
from harness.models.sources import BuildContext, ModelSpec, build_model

@dataclass
class ReproduceResult:
    """What reproduce() did: the table, its runs, the compared cells and the printed text."""
    table: Table
    jobs: list[Job]
    cells: pd.DataFrame | None  # None for a dry run
    text: str
    csv: Path | None = None

    @property
    def exit_code(self) -> int:
        """What `ssl-bench reproduce` exits with (``exit_status``)."""
        return exit_status(self.cells)


def reproduce(table: str | Path, data_root: str | Path | dict | None = None, zoo_dir: str | Path | None = None,
              dry_run: bool = False, *, trust: bool = False, models: list[str] | None = None,
              datasets: list[str] | None = None, runs_dir: str | Path | None = None, force: bool = False,
              out_dir: str | Path | None = None, zoo_path: str | Path | None = None,
              device: str = "auto", echo: Callable[[str], None] | None = print,
              gpu: str | GpuChoice = DEFAULT_GPU, precision: str | None = None, n_gpus: int = 1) -> ReproduceResult:
    """Regenerate one paper table from zoo checkpoints and compare with the published numbers.

    ``table``: a name from ``list_tables()`` (e.g. "cribo-table1") or a table YAML path.
    ``data_root``: folder holding the datasets in their usual layouts (or {dataset key: folder}).
    ``zoo_dir``: imported checkpoints ``<zoo name>.safetensors`` or official files (see
    ``harness.models.zoo.find_checkpoint``). ``models`` / ``datasets`` restrict the table.
    ``gpu`` / ``precision`` / ``n_gpus``: what the plan's GPU-hours are estimated for (a
    configs/gpus.yaml name; default fp32, the protocols' precision); the runs themselves use
    the protocols' own settings.
    Writes ``reproduce_<table>.csv`` into ``out_dir`` if given."""
    choice = gpu if isinstance(gpu, GpuChoice) else GpuChoice.of(gpu, precision, n_gpus)
    zoo_dir = Path(zoo_dir) if zoo_dir is not None else default_zoo_dir()
    tab, jobs = plan(table, data_root, zoo_dir, trust=trust, models=models, datasets=datasets, zoo_path=zoo_path)
    for job in jobs:
        job.gpu_hours = choice.gpu_hours(job.cost.flops_by_workload)
    plan_text = format_plan(tab, jobs, data_root, zoo_dir, gpu=choice)
    if dry_run:
        if echo:
            echo(plan_text)
        return ReproduceResult(tab, jobs, None, plan_text)
    if echo:
        echo(plan_text + "\n")
    from harness.running.evaluate import evaluate
    from harness.registry import PROTOCOLS

    runs = Path(runs_dir) if runs_dir is not None else None
    for job in jobs:
        if job.status != "ready":
            continue
        ps = tab.spec.protocols[job.protocol]
        ds = tab.spec.datasets[job.dataset]
        try:
            model = build_model(ModelSpec("zoo", job.zoo_name, {"trust": trust}),
                                BuildContext(device=device, zoo_dir=zoo_dir, zoo_path=zoo_path))
            if job.arch_kwargs is None:  # a harness checkpoint found only now: settings by its patch
                job.values, problem = job_values(ps, job.variant, {"patch_size": model.backbone.patch_size})
                if problem:  # as the plan says it for a model whose patch size it knows
                    job.status, job.message = "protocol unavailable", problem
                    continue
            protocol = PROTOCOLS.get(job.protocol).from_preset(
                ps.preset, {"dataset": ds.reader, **job.values}, source=str(tab.source))
            if echo:
                echo(f"[reproduce] {job.zoo_name}: {job.protocol} on {job.dataset} ...")
            job.records, job.skipped = evaluate(model, protocol, job.data_path, preset=ps.preset,
                                                runs_dir=runs, force=force)
            job.status = "done"
        except CheckpointError as exc:
            job.status = "needs --trust-checkpoint" if "--trust-checkpoint" in str(exc) else "checkpoint error"
            job.message = str(exc).splitlines()[0]
        except SslBenchError as exc:
            kind = "missing dataset" if type(exc).__name__ == "DataError" else "failed"
            job.status, job.message = kind, f"{type(exc).__name__}: {str(exc).splitlines()[0]}"
        except Exception as exc:  # one broken run must not lose the rest of the table
            traceback.print_exc(file=sys.stderr)
            job.status, job.message = "failed", f"{type(exc).__name__}: {exc}"
    cells = compare_cells(tab, jobs)
    text = format_comparison(cells, f"{tab.spec.title}: measured vs paper", tolerances=tolerance_lines(tab))
    csv_path = None
    if out_dir is not None:
        from harness.io_utils import atomic_write_text

        csv_path = atomic_write_text(Path(out_dir) / f"reproduce_{tab.name}.csv", cells.to_csv(index=False))
    if echo:
        echo(text + (f"\nwritten: {csv_path}" if csv_path else ""))
    return ReproduceResult(tab, jobs, cells, text, csv_path)


# ----------------------------------------------------------------------------- CLI
def add_cli(subparsers) -> None:
    """Adds `reproduce` and `paper` subcommands to an argparse subparsers object."""
    r = subparsers.add_parser(
        "reproduce", help="reproduce a paper table from zoo checkpoints",
        description="Run the protocols a paper table needs on its zoo checkpoints and compare every cell "
                    "with the published number. A cell passes iff |measured - paper| <= the tolerance the "
                    "table YAML states (with its reason) for the protocol; a std over seeds above the "
                    "tolerance makes it inconclusive; only records whose variant is the table's protocol "
                    "exactly count, and several matching variant groups are ambiguous (never the best "
                    "of them).",
        epilog="exit status: 0 when at least one cell was measured and every measured cell passed (and for "
               "--dry-run); 1 when any cell failed (DIFFERS, inconclusive, ambiguous, not measured by a "
               "finished run, or its run failed) or when nothing was measured; 2 for a usage or config "
               "error. Cells without a checkpoint, dataset or protocol are reported and fail nothing by "
               "themselves.")
    r.add_argument("table", help=f"one of: {', '.join(list_tables())} (or a table YAML)")
    r.add_argument("--data-root", default=None, help="folder holding the datasets")
    r.add_argument("--zoo-dir", default=None, help=f"imported / downloaded checkpoints (default {default_zoo_dir()})")
    r.add_argument("--dry-run", action="store_true",
                   help="print the plan (checkpoints, datasets, FLOPs, GPU-hours) only")
    r.add_argument("--gpu", default=DEFAULT_GPU,
                   help=f"GPU model the GPU-hours are estimated for (configs/gpus.yaml; default {DEFAULT_GPU})")
    r.add_argument("--precision", default=DEFAULT_PRECISION, choices=("fp32", "fp16", "bf16"),
                   help=f"precision of the estimate (default {DEFAULT_PRECISION}, the protocols' default; "
                        "the runs use their protocol's setting)")
    r.add_argument("--gpus", type=int, default=1, help="GPU count for the wall-clock estimate (default 1)")
    r.add_argument("--trust-checkpoint", action="store_true",
                   help="allow unpickling official full checkpoints (check their origin first)")
    r.add_argument("--models", default=None, help="comma-separated zoo names to restrict to")
    r.add_argument("--datasets", default=None, help="comma-separated dataset keys to restrict to")
    r.add_argument("--runs", default=None, help="records folder (default results/runs)")
    r.add_argument("--out", default=None, help="write reproduce_<table>.csv here")
    r.add_argument("--force", action="store_true", help="re-run protocols that have records")
    r.add_argument("--device", default="auto", help=f"where the models run: {DEVICE_HELP}")
    r.set_defaults(func=cmd_reproduce)
    p = subparsers.add_parser("paper", help="list the published numbers (results/paper)")
    p.add_argument("table", nargs="?", default=None)
    p.set_defaults(func=cmd_paper)


def _split(s: str | None) -> list[str] | None:
    return [x.strip() for x in s.split(",") if x.strip()] if s else None


def cmd_reproduce(args) -> int:
    res = reproduce(args.table, args.data_root, args.zoo_dir, dry_run=args.dry_run, trust=args.trust_checkpoint,
                    models=_split(args.models), datasets=_split(args.datasets), runs_dir=args.runs,
                    force=args.force, out_dir=args.out, device=args.device, gpu=args.gpu,
                    precision=args.precision, n_gpus=args.gpus)
    return exit_status(res.cells)


def cmd_paper(args) -> int:
    if args.table is None:
        print("tables: " + ", ".join(list_tables()))
        df = paper_numbers()
    else:
        df = paper_numbers(args.table)
    with pd.option_context("display.max_rows", None, "display.width", 200):
        print(df.to_string(index=False))
    return 0


__all__ = ["ReproduceResult", "reproduce", "add_cli", "cmd_reproduce", "cmd_paper"]
