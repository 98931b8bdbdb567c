"""Harness work as submitit jobs, on this machine (`local`) or on a SLURM cluster (`slurm`).

A launched suite does in the parent only what is cheap and shared: SynthScenes generation,
checking the suite, and the leaderboard. The heavy steps run as isolated jobs, each a
process of its own (timm's bulk runner does the same, so one crash or out-of-memory does
not end a sweep): first one job per model that needs pretraining, then one job per
(model, protocol entry). The jobs call the very steps `harness.running.suite.run_suite` calls
(`prepare_model`, `evaluate_entry`) and hand their records back through submitit's result
pickle, so the leaderboard is the in-process run's. A failing job is reported with its id,
model, protocol and traceback tail; the others go on.

Launched pretraining is one job of `nodes x tasks_per_node` tasks; each task exports the
torch.distributed variables from the job's environment (what `init_distributed_mode` of the
official DINO / iBOT code reads from SLURM) and runs `harness.training.engine.pretrain`, whose
`init_from_env` then sees what torchrun would have set.
"""
from __future__ import annotations

import os
import shlex
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from harness.errors import MissingDependencyError, SslBenchError
from harness.paths import REPO_ROOT, home, results_dir
from harness.results.pair_status import FAILED, PairStatus, pair_label
from harness.running.suite import (EvalOutcome, ModelEntry, ProtocolEntry, SuiteConfig, SuiteData, cached_checkpoint,
                           check_model_entry, evaluate_entry, finish_suite, model_entries, prepare_data,
                           prepare_model, pretrained_checkpoint, runnable_protocols, suite_pairs, suite_protocol,
                           supervised_checkpoint_for, supervised_spec)

CLUSTERS = ("local", "slurm")
DEFAULT_TIME_MIN = 24 * 60  # submitit's own defaults (2 min local, 5 min slurm) would kill real runs
# SLURM's default is 1 CPU per task, which starves a GPU: the official DINO / iBOT launchers ask
# for 10 per task (their 10 DataLoader workers, configs/methods/*_vit_*.yaml's num_workers).
DEFAULT_CPUS_PER_TASK = 10
# #SBATCH options (as --slurm-extra keys) that give a job GPUs without --gpus-per-node
_GPU_OPTIONS = {"gres", "gpus", "gpus_per_task", "gpus-per-task", "gpus_per_node", "gpus-per-node"}
POLL_S = 1.0
TAIL_LINES = 15


@dataclass
class LaunchOptions:
    """Where and how jobs run. Everything cluster-specific is the user's to give."""
    cluster: str  # local | slurm
    job_dir: Path  # submitit's pickles and the jobs' logs
    max_parallel: int | None = None  # jobs at once; None: 1 on local, no limit on slurm; 0: no limit
    partition: str | None = None
    time_min: int = DEFAULT_TIME_MIN
    gpus_per_node: int | None = None  # local: default all GPUs this process sees
    cpus_per_task: int | None = None
    mem_gb: float | None = None
    slurm_extra: dict[str, str] = field(default_factory=dict)  # extra #SBATCH --key=value lines
    device: str = "auto"  # passed to every job as text; resolved there, on the node that runs it
    threads: int | None = None  # torch CPU threads inside each job
    # the data-parallel jobs of a suite (entries whose protocol trains on every process): one job
    # of nodes x tasks_per_node tasks each; every other job is one process
    nodes: int = 1
    tasks_per_node: int = 1

    def __post_init__(self):
        if self.cluster not in CLUSTERS:
            raise SslBenchError(f"launcher must be one of {', '.join(CLUSTERS)}; found {self.cluster!r}")
        if self.max_parallel is not None and self.max_parallel < 0:
            raise SslBenchError(f"--max-parallel must be 0 (no limit) or more; found {self.max_parallel}")
        if self.nodes < 1 or self.tasks_per_node < 1:
            raise SslBenchError(f"--nodes and --tasks-per-node must be at least 1; found {self.nodes} and "
                                f"{self.tasks_per_node}")

    @property
    def world_size(self) -> int:
        """Processes of a suite's data-parallel job."""
        return self.nodes * self.tasks_per_node

    def job_device(self) -> str:
        """The device spec every job gets and every cache key is computed from, fixed here in
        the parent. `auto` on SLURM is CUDA when the jobs ask for GPUs (a login node's own lack
        of one says nothing about the compute nodes); locally, CUDA when this machine has one."""
        from harness.runtime.device import device_type

        if self.device.strip().lower() != "auto":
            return self.device
        if self.cluster == "slurm":
            asks_gpus = bool(self.gpus_per_node) or bool(_GPU_OPTIONS & set(self.slurm_extra))
            return "cuda" if asks_gpus else "cpu"
        return device_type("auto")

    def parallel_limit(self) -> int | None:
        """How many jobs may run at once (None: all). Locally one: on a small machine two
        jobs at once share the cores and each runs several times slower."""
        if self.max_parallel is None:
            return 1 if self.cluster == "local" else None
        return self.max_parallel or None


def parse_slurm_extra(pairs: list[str] | None) -> dict[str, str]:
    """`--slurm-extra KEY=VALUE` items -> submitit's slurm_additional_parameters."""
    extra = {}
    for item in pairs or []:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise SslBenchError(f"--slurm-extra expects KEY=VALUE (e.g. account=myproject, becoming "
                                f"#SBATCH --account=myproject); found {item!r}")
        extra[key.strip()] = value.strip()
    return extra


def default_job_dir(name: str) -> Path:
    return results_dir() / "jobs" / f"{name}-{time.strftime('%Y%m%d-%H%M%S')}"


def require_submitit():
    try:
        import submitit
    except ImportError:
        raise MissingDependencyError(
            "--launcher local/slurm runs jobs through submitit, which is not installed; install it "
            "with: pip install 'ssl-bench[cluster]' (or pip install submitit), or use --launcher inprocess"
        ) from None
    return submitit


# ----------------------------------------------------------------------------- executor
def _visible_gpus(requested: int | None) -> str:
    """The GPUs a local job may use: those this process sees, the first `requested` of them.
    submitit's local executor sets CUDA_VISIBLE_DEVICES to 0..n-1 itself, which would hide
    every GPU by default and ignore a CUDA_VISIBLE_DEVICES given to the parent."""
    listed = os.environ.get("CUDA_VISIBLE_DEVICES")
    if listed is not None:
        ids = [g.strip() for g in listed.split(",") if g.strip()]
    else:
        import torch

        ids = [str(i) for i in range(torch.cuda.device_count())]
    return ",".join(ids if requested is None else ids[:requested])


def _setup_lines(options: LaunchOptions) -> list[str]:
    """Shell lines run before each job: the job imports this checkout's harness and writes
    records and caches where the parent reads them, even where the environment is not
    passed on (sbatch --export=NONE) or another ssl-bench is installed."""
    lines = [f"export PYTHONPATH={shlex.quote(str(REPO_ROOT))}${{PYTHONPATH:+:$PYTHONPATH}}",
             f"export SSL_BENCH_HOME={shlex.quote(str(home()))}",
             f"export SSL_BENCH_RESULTS={shlex.quote(str(results_dir()))}"]
    if options.cluster == "local":
        lines.append(f"export CUDA_VISIBLE_DEVICES={shlex.quote(_visible_gpus(options.gpus_per_node))}")
    return lines


def make_executor(options: LaunchOptions, name: str, nodes: int = 1, tasks_per_node: int = 1,
                  gpus_per_node: int | None = None):
    """A submitit AutoExecutor with the options mapped onto its parameters. `gpus_per_node`:
    what each job asks for (default: the options'); SLURM jobs get DEFAULT_CPUS_PER_TASK CPUs
    per task unless --cpus-per-task says otherwise."""
    submitit = require_submitit()
    if options.cluster == "local" and nodes > 1:
        raise SslBenchError(f"the local launcher runs on this machine only; found --nodes {nodes}: "
                            "use --launcher slurm for several nodes")
    try:
        executor = submitit.AutoExecutor(folder=str(options.job_dir), cluster=options.cluster)
    except RuntimeError as exc:  # slurm: no srun on PATH
        raise SslBenchError(f"--launcher {options.cluster} needs SLURM's commands on this machine; "
                            f"submitit says: {exc} Run from a SLURM login node, or use --launcher local"
                            ) from None
    setup = _setup_lines(options)
    params: dict[str, Any] = {
        "name": name, "timeout_min": options.time_min, "nodes": nodes, "tasks_per_node": tasks_per_node,
        "gpus_per_node": options.gpus_per_node if gpus_per_node is None else gpus_per_node,
        "cpus_per_task": options.cpus_per_task or (DEFAULT_CPUS_PER_TASK if options.cluster == "slurm" else None),
        "mem_gb": options.mem_gb, "slurm_partition": options.partition,
        "slurm_additional_parameters": options.slurm_extra or None,
        "slurm_setup": setup, "local_setup": setup,  # each executor takes its own, ignores the other
    }
    try:
        executor.update_parameters(**params)
    except (AssertionError, NameError, ValueError) as exc:
        raise SslBenchError(f"submitit refused the job parameters {params}: {exc}") from None
    return executor


# ----------------------------------------------------------------------------- running jobs
@dataclass
class JobSpec:
    label: str  # what the job does, as failures name it: "knn on dino", "model dino"
    fn: Callable
    args: tuple
    model: str
    executor: Any = None  # its own executor (a multi-task job); None: the one run_jobs is given


@dataclass
class JobOutcome:
    spec: JobSpec
    job_id: str
    stdout: Path
    stderr: Path
    value: Any = None  # the job function's return value (task 0's in a multi-task job)
    error: str | None = None  # submitit's report: the job's traceback, or its stderr when killed

    @property
    def ok(self) -> bool:
        return self.error is None

    def error_lines(self) -> list[str]:
        """The traceback inside submitit's report (between its dashed rules), else the report."""
        lines = (self.error or "").splitlines()
        rules = [i for i, line in enumerate(lines) if set(line.strip()) == {"-"} and len(line.strip()) > 10]
        if len(rules) >= 2:
            lines = lines[rules[0] + 1:rules[1]]
        return [line for line in lines if line.strip()]

    def _last_line(self) -> str:
        return (self.error_lines() or ["no error text"])[-1].strip()

    def error_text(self) -> str:
        """The exception's line, then the job and where its log is."""
        return f"{self._last_line()} (job {self.job_id}; log {self.stderr})"

    def failure(self) -> str:
        """One line: which job, what it ran, the exception, where its log is."""
        return f"{self.spec.label} (job {self.job_id}): {self._last_line()}; log {self.stderr}"


def _collect(spec: JobSpec, job) -> JobOutcome:
    paths = job.paths
    try:
        error = job.exception()  # waits; None when every task succeeded
        value = job.results()[0] if error is None else None
    except Exception as exc:  # e.g. a result that cannot be unpickled here
        error, value = exc, None
    return JobOutcome(spec, str(job.job_id), paths.stdout, paths.stderr, value,
                      None if error is None else str(error) or type(error).__name__)


def _report_failure(outcome: JobOutcome, log) -> None:
    log(f"job {outcome.job_id} FAILED: {outcome.spec.label}")
    for line in outcome.error_lines()[-TAIL_LINES:]:
        log(f"    {line}")
    log(f"    log: {outcome.stderr}")


def _submit(executor, spec: JobSpec):
    try:
        return (spec.executor or executor).submit(spec.fn, *spec.args)
    except Exception as exc:  # sbatch refusing the options refuses every job alike: stop here
        raise SslBenchError(f"submitting the job '{spec.label}' failed: {exc}; check the launcher options "
                            "(--partition, --time-min, --gpus-per-node, --slurm-extra); jobs submitted "
                            "before it keep running") from None


def run_jobs(executor, specs: list[JobSpec], max_parallel: int | None, log=print,
             on_done: Callable[[JobOutcome], None] | None = None) -> list[JobOutcome]:
    """Submit `specs` keeping at most `max_parallel` running (None: all at once); wait for
    all. Outcomes come back in the order of `specs`, whatever order the jobs finish in."""
    outcomes: list[JobOutcome | None] = [None] * len(specs)
    pending = list(range(len(specs)))
    running: dict[int, Any] = {}
    while pending or running:
        while pending and (max_parallel is None or len(running) < max_parallel):
            i = pending.pop(0)
            job = _submit(executor, specs[i])
            log(f"job {job.job_id}: {specs[i].label}; log {job.paths.stdout}")
            running[i] = job
        finished = [i for i, job in running.items() if job.done()]
        for i in finished:
            outcome = outcomes[i] = _collect(specs[i], running.pop(i))
            if not outcome.ok:
                _report_failure(outcome, log)
            elif on_done is not None:
                on_done(outcome)
        if not finished:
            time.sleep(POLL_S)
    return outcomes


class Requeueable:
    """A job function that SLURM requeues after a time-out or a preemption: submitit calls
    `checkpoint` when the job is signalled and resubmits the call it returns (the protocol of
    submitit.helpers.Checkpointable). The same call continues the work: pretraining resumes
    from resume.pt, and finished checkpoints are found in the cache."""

    def __init__(self, fn: Callable):
        self.fn = fn

    def __call__(self, *args, **kwargs):
        return self.fn(*args, **kwargs)

    def checkpoint(self, *args, **kwargs):
        from submitit.helpers import DelayedSubmission

        return DelayedSubmission(self, *args, **kwargs)


# ----------------------------------------------------------------------------- inside a job
@dataclass
class JobSettings:
    """Per-process settings the parent's command line gives each job."""
    device: str = "auto"
    threads: int | None = None

    def apply(self):
        """Resolve the device once, on the node that runs the job (a GPU asked for but absent
        fails here, clearly); returns it."""
        import torch

        from harness.runtime.device import prepare, resolve_device

        if self.threads:
            torch.set_num_threads(self.threads)
        return prepare(resolve_device(self.device))


def pretrain_model_job(entry: ModelEntry, data: SuiteData, progress: bool, settings: JobSettings) -> str:
    settings.apply()
    return str(pretrained_checkpoint(entry, data.pretrain_root, data.pretrain_name, progress, device=settings.device))


def supervised_model_job(entry: ModelEntry, data: SuiteData, progress: bool, settings: JobSettings) -> str:
    settings.apply()
    return str(supervised_checkpoint_for(entry, data, progress, device=settings.device))


def cached_supervised_checkpoint(entry: ModelEntry, data: SuiteData, device: str) -> Path | None:
    from harness.context.supervised import checkpoint_dir

    spec = supervised_spec(entry)
    ckpt = checkpoint_dir(spec, Path(data.fill(spec.data_root)), device) / "backbone.safetensors"
    return ckpt if ckpt.is_file() else None


def evaluate_job(model_entry: ModelEntry, protocol_entry: ProtocolEntry, data: SuiteData, source: str,
                 force: bool, progress: bool, settings: JobSettings) -> EvalOutcome:
    device = settings.apply()
    model = prepare_model(model_entry, data, progress, device=str(device))
    outcome = evaluate_entry(model, protocol_entry, data, source, force)
    print(outcome.summary())
    return outcome


def distributed_pretrain_job(cfg, out_dir: str, source: str, progress: bool, settings: JobSettings) -> str:
    """One task of a launched pretraining job."""
    from harness.runtime.distributed import export_job_environment
    from harness.training.engine import pretrain

    export_job_environment()
    settings.apply()
    return str(pretrain(cfg, Path(out_dir), source, progress=progress))


def distributed_evaluate_job(model_entry: ModelEntry, protocol_entry: ProtocolEntry, data: SuiteData, source: str,
                             force: bool, progress: bool, settings: JobSettings) -> EvalOutcome:
    """One task of a launched data-parallel evaluation (a protocol that trains on every process,
    RUNS_ON_EVERY_RANK): the same rendezvous as pretraining's tasks; the protocol joins the group,
    and rank 0 alone writes the record and the checkpoint. Task 0's outcome is the job's."""
    from harness.runtime.distributed import export_job_environment

    export_job_environment()
    return evaluate_job(model_entry, protocol_entry, data, source, force, progress, settings)


# ----------------------------------------------------------------------------- suites
def _check_suite(suite: SuiteConfig, source: str, data: SuiteData, options: LaunchOptions,
                 log) -> tuple[list, list]:
    """Model and protocol entries, every one checked here: a typo fails before any job starts.
    Data roots are not checked: they may exist only on the nodes that run the jobs."""
    entries = model_entries(suite)
    for entry in entries:
        check_model_entry(entry, data)
    protocols = runnable_protocols(suite, log)
    for p in {id(p): p for p, _ in suite_pairs(protocols, entries)}.values():
        protocol = suite_protocol(p, source)
        if data_parallel(p, options):  # e.g. a batch the tasks cannot share: before any job
            protocol.check_processes(options.world_size)
    return entries, protocols


def _pretrain_stage(executor, entries, data, options, progress, failures, log) -> dict[str, str]:
    """Pretrain every model without a cached checkpoint; returns the names that failed, with their errors."""
    settings = JobSettings(options.job_device(), options.threads)
    specs = []
    for entry in entries:
        if not (entry.pretrain or entry.supervised is not None):
            continue
        # keyed by the jobs' device spec, not by what this (login) node has
        ckpt = (cached_checkpoint(entry, data.pretrain_root, data.pretrain_name, settings.device) if entry.pretrain
                else cached_supervised_checkpoint(entry, data, settings.device))
        if ckpt is not None:
            log(f"[{entry.name}] using cached checkpoint {ckpt}")
            continue
        # the supervised reference trains once here, not in each of its evaluation jobs
        job = Requeueable(pretrain_model_job if entry.pretrain else supervised_model_job)
        specs.append(JobSpec(f"model {entry.name}", job, (entry, data, progress, settings), model=entry.name))
    outcomes = run_jobs(executor, specs, options.parallel_limit(), log,
                        on_done=lambda o: log(f"[{o.spec.model}] pretrained: {o.value}"))
    failures += [o.failure() for o in outcomes if not o.ok]
    return {o.spec.model: o.error_text() for o in outcomes if not o.ok}


def _evaluation_stage(executor, entries, protocols, data, source, options, force, progress,
                      failures, log, failed_models: dict[str, str]) -> tuple[list[dict], list[PairStatus]]:
    """One job per (model, protocol entry): (records, every pair's status), in the in-process run's
    order. The pairs of a model whose pretraining failed (``failed_models``: name -> error) fail too."""
    settings = JobSettings(options.job_device(), options.threads)
    pairs = suite_pairs(protocols, entries)
    specs = [_evaluation_spec(entry, p, data, source, options, force, progress, settings)
             for p, entry in pairs if entry.name not in failed_models]
    outcomes = iter(run_jobs(executor, specs, options.parallel_limit(), log,
                             on_done=lambda o: log(f"{o.value.summary()} (job {o.job_id})")))
    records, statuses = [], []
    for p, entry in pairs:
        if entry.name in failed_models:
            statuses.append(PairStatus(entry.name, p.name, p.preset, FAILED, f"model {entry.name}: "
                                       f"{failed_models[entry.name]}"))
            continue
        o = next(outcomes)
        if o.ok:
            records += o.value.records
            statuses.append(o.value.status())
        else:
            failures.append(o.failure())
            statuses.append(PairStatus(entry.name, p.name, p.preset, FAILED, o.error_text()))
    return records, statuses


def data_parallel(entry: ProtocolEntry, options: LaunchOptions) -> bool:
    """Whether an entry runs as one job of several tasks: its protocol class trains on every
    process (RUNS_ON_EVERY_RANK) and the options ask for more than one."""
    from harness.registry import PROTOCOLS

    return options.world_size > 1 and PROTOCOLS.get(entry.name).RUNS_ON_EVERY_RANK


def _evaluation_spec(entry: ModelEntry, p: ProtocolEntry, data: SuiteData, source: str, options: LaunchOptions,
                     force: bool, progress: bool, settings: JobSettings) -> JobSpec:
    label = pair_label(p.name, p.preset, entry.name)
    args = (entry, p, data, source, force, progress, settings)
    if not data_parallel(p, options):
        return JobSpec(label, evaluate_job, args, model=entry.name)
    executor = make_executor(options, name=f"ssl-bench-{p.name}", nodes=options.nodes,
                             tasks_per_node=options.tasks_per_node, gpus_per_node=_task_gpus(options))
    # a time-out or preemption requeues the job, which resumes from the protocol's resume file
    return JobSpec(f"{label} ({options.nodes} node(s) x {options.tasks_per_node} task(s))",
                   Requeueable(distributed_evaluate_job), args, model=entry.name, executor=executor)


def _task_gpus(options: LaunchOptions, tasks: int | None = None) -> int | None:
    """GPUs a multi-task job asks for: the options', else on SLURM one per task when it runs on CUDA."""
    if options.gpus_per_node is not None or options.cluster != "slurm" or options.job_device() == "cpu":
        return options.gpus_per_node
    return tasks or options.tasks_per_node


def _suite_job_gpus(options: LaunchOptions) -> int | None:
    """GPUs a suite job asks SLURM for: each job is one process on one device, so one GPU
    when the jobs run on CUDA (more would sit idle)."""
    if options.cluster != "slurm" or options.job_device() == "cpu":
        return options.gpus_per_node
    if options.gpus_per_node is not None and options.gpus_per_node > 1 and options.world_size == 1:
        raise SslBenchError(f"each suite job is one process on one GPU; found --gpus-per-node "
                            f"{options.gpus_per_node}: give 1 (jobs run side by side, up to --max-parallel), "
                            "or pretrain on several GPUs with `ssl-bench pretrain --launcher slurm`")
    return 1


def launch_suite(suite: SuiteConfig, source: str, options: LaunchOptions, *, force: bool = False,
                 progress: bool = True, out_dir: Path | None = None, log=print) -> dict[str, Any]:
    """`run_suite` with its pretraining and evaluations as jobs; same return value."""
    require_submitit()  # before any data is generated
    t0 = time.perf_counter()
    data = prepare_data(suite, progress, log)
    entries, protocols = _check_suite(suite, source, data, options, log)
    executor = make_executor(options, name=f"ssl-bench-{Path(source).stem}", gpus_per_node=_suite_job_gpus(options))
    log(f"launching on {options.cluster}; job logs under {options.job_dir}")
    failures: list[str] = []
    failed_models = _pretrain_stage(executor, entries, data, options, progress, failures, log)
    records, pairs = _evaluation_stage(executor, entries, protocols, data, source, options, force, progress,
                                       failures, log, failed_models)
    return finish_suite(records, failures, t0, out_dir, log, suite, pairs=pairs)


# ----------------------------------------------------------------------------- pretraining
def launch_pretrain(cfg, out_dir: Path, source: str, options: LaunchOptions, *, nodes: int = 1,
                    tasks_per_node: int | None = None, progress: bool = True, log=print) -> JobOutcome:
    """One job of `nodes x tasks_per_node` data-parallel tasks (default one per GPU, else one)."""
    tasks = tasks_per_node or options.gpus_per_node or 1
    method = cfg.method.get("name", "method")
    device = options.job_device()
    executor = make_executor(options, name=f"ssl-bench-pretrain-{method}", nodes=nodes, tasks_per_node=tasks,
                             gpus_per_node=_task_gpus(options, tasks))
    settings = JobSettings(device, options.threads)
    # a time-out or preemption requeues the job, which resumes from resume.pt
    spec = JobSpec(f"pretrain {method} ({nodes} node(s) x {tasks} task(s)) -> {out_dir}",
                   Requeueable(distributed_pretrain_job), (cfg, str(Path(out_dir).resolve()), source, progress,
                                                           settings),
                   model=method)
    [outcome] = run_jobs(executor, [spec], None, log)
    return outcome
