"""`ssl-bench reproduce` and `ssl-bench paper`: regenerate a paper table from zoo checkpoints.

``reproduce(table, data_root, zoo_dir)`` runs, for every (zoo checkpoint, protocol, dataset)
the table needs (harness.paper.plan), the registered protocol through ``harness.running.evaluate``
(so the result records land in results/runs and feed the leaderboards), then prints
measured / paper / delta side by side with the seed spread and a verdict per cell
(harness.paper.verdict). ``dry_run=True`` prints the plan only: checkpoints, protocols,
datasets, FLOPs and GPU-hours.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import pandas as pd

from harness.runtime.device import DEVICE_HELP
from harness.errors import CheckpointError, DataError, SslBenchError
from harness.paper.gpus import DEFAULT_GPU, DEFAULT_PRECISION, GpuChoice
from harness.paper.plan import Job, format_plan, job_values, plan
from harness.paper.spec import Table, list_tables, paper_numbers
from harness.paper.verdict import compare_cells, exit_status, format_comparison, tolerance_lines
from harness.paths import default_zoo_dir
from harness.running.suite import (ModelEntry, ProtocolEntry, SuiteConfig, SuiteData, execute_suite,
                                   prepare_model)

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
    run_plan(tab, jobs, device=device, zoo_dir=zoo_dir, zoo_path=zoo_path, trust=trust, runs_dir=runs_dir,
             force=force, log=echo or (lambda _: None))
    cells = compare_cells(tab, jobs)
    text = format_comparison(cells, f"{tab.spec.title}: measured vs paper", tolerances=tolerance_lines(tab))
    csv_path = None
    if out_dir is not None:
        from harness.io_utils import atomic_write_text

        csv_path = atomic_write_text(Path(out_dir) / f"reproduce_{tab.name}.csv", cells.to_csv(index=False))
    if echo:
        echo(text + (f"\nwritten: {csv_path}" if csv_path else ""))
    return ReproduceResult(tab, jobs, cells, text, csv_path)


def _job_status(exc: BaseException) -> tuple[str, str]:
    """(job status, message) of the error that stopped a job."""
    if isinstance(exc, CheckpointError):
        status = "needs --trust-checkpoint" if "--trust-checkpoint" in str(exc) else "checkpoint error"
        return status, str(exc).splitlines()[0]
    if isinstance(exc, SslBenchError):
        kind = "missing dataset" if isinstance(exc, DataError) else "failed"
        return kind, f"{type(exc).__name__}: {str(exc).splitlines()[0]}"
    return "failed", f"{type(exc).__name__}: {exc}"


def plan_suite(tab: Table, jobs: list[Job], *, device: str = "auto", zoo_dir: Path | None = None,
               zoo_path: str | Path | None = None, trust: bool = False) -> tuple[SuiteConfig, list[Job]]:
    """The suite a table's ready jobs are: one zoo model per checkpoint, one protocol entry per
    job (its preset, dataset, data root and settings) on that model only. Returns the suite and
    the jobs in its protocol entries' order."""
    ready = [job for job in jobs if job.status == "ready"]
    names = list(dict.fromkeys(job.zoo_name for job in ready))
    models = [ModelEntry(name=name, model={"source": "zoo", "target": name, "trust": trust}) for name in names]
    protocols = []
    for job in ready:
        ps, ds = tab.spec.protocols[job.protocol], tab.spec.datasets[job.dataset]
        protocols.append(ProtocolEntry(name=job.protocol, dataset=ds.reader, data_root=str(job.data_path),
                                       preset=ps.preset, set=dict(job.values), models=[job.zoo_name]))
    suite = SuiteConfig(device=device, pretrain_data="", models=models, protocols=protocols,
                        zoo_dir=str(zoo_dir) if zoo_dir else None, zoo_path=str(zoo_path) if zoo_path else None)
    return suite, ready


def _settings_by_patch(tab: Table, jobs: list[Job], suite: SuiteConfig, log) -> dict:
    """Build the models whose patch size the plan could not read (a harness checkpoint without
    its architecture in the metadata), then give their jobs the table's settings for that patch
    size. Returns the models built, by name, for the run to use."""
    unknown = {job.zoo_name for job in jobs if job.status == "ready" and job.arch_kwargs is None
               and tab.spec.protocols[job.protocol].by_patch}
    built: dict = {}
    data = SuiteData(None, None, "", Path(suite.zoo_dir) if suite.zoo_dir else None,
                     Path(suite.zoo_path) if suite.zoo_path else None)
    for entry in suite.models:
        if entry.name not in unknown:
            continue
        try:
            built[entry.name] = prepare_model(entry, data, log=log, device=suite.device)
        except SslBenchError:
            continue  # the run meets the same error and reports it with the job
        patch = {"patch_size": built[entry.name].backbone.patch_size}
        for job in jobs:
            if job.zoo_name == entry.name and job.status == "ready":
                job.values, problem = job_values(tab.spec.protocols[job.protocol], job.variant, patch)
                if problem:
                    job.status, job.message = "protocol unavailable", problem
    return built


def run_plan(tab: Table, jobs: list[Job], *, device: str = "auto", zoo_dir: Path | None = None,
             zoo_path: str | Path | None = None, trust: bool = False, runs_dir: str | Path | None = None,
             force: bool = False, log=print) -> None:
    """Run a table's ready jobs as a suite, through the steps `ssl-bench run` takes
    (harness.running.suite.execute_suite), and give each job its records or its error."""
    suite, _ = plan_suite(tab, jobs, device=device, zoo_dir=zoo_dir, zoo_path=zoo_path, trust=trust)
    built = _settings_by_patch(tab, jobs, suite, log)
    suite, ready = plan_suite(tab, jobs, device=device, zoo_dir=zoo_dir, zoo_path=zoo_path, trust=trust)
    run = execute_suite(suite, str(tab.source), force=force, progress=False, log=log,
                        runs_dir=Path(runs_dir) if runs_dir is not None else None,
                        prepared=built)
    by_entry = {id(pair.protocol): pair for pair in run.pairs}
    for job, entry in zip(ready, suite.protocols):
        pair = by_entry.get(id(entry))
        if pair is None:  # its protocol's optional dependency is not installed
            job.status, job.message = "protocol unavailable", f"{job.protocol}: needs {', '.join(entry.requires)}"
        elif pair.error is not None:
            job.status, job.message = _job_status(pair.error)
        elif pair.outcome.not_applicable:
            job.status, job.message = "protocol unavailable", pair.outcome.not_applicable
        else:
            job.records, job.skipped, job.status = pair.outcome.records, pair.outcome.skipped, "done"


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
