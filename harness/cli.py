"""Command-line interface: `ssl-bench` / `python run_benchmark.py`."""
from __future__ import annotations

import argparse
import importlib
import sys
from pathlib import Path

from harness.errors import SslBenchError

DEFAULT_SUITE = "suites/default.yaml"
RETRAIN_SUITE = "suites/synthscenes_retrain.yaml"  # `--pretrain`: the shipped checkpoints, retrained


def _threads(n: int | None) -> None:
    if n:  # torch only when asked: the commands that read records never import it
        import torch

        torch.set_num_threads(n)


def _launch_options(args, default_job_dir: Path, device: str):
    """The launcher options of `run` / `pretrain` (harness.running.launch.LaunchOptions)."""
    from harness.running.launch import DEFAULT_TIME_MIN, LaunchOptions, parse_slurm_extra

    return LaunchOptions(
        cluster=args.launcher, job_dir=Path(args.job_dir) if args.job_dir else default_job_dir,
        max_parallel=getattr(args, "max_parallel", None), partition=args.partition,
        time_min=args.time_min or DEFAULT_TIME_MIN, gpus_per_node=args.gpus_per_node,
        cpus_per_task=args.cpus_per_task, mem_gb=args.mem_gb, slurm_extra=parse_slurm_extra(args.slurm_extra),
        device=device, threads=args.threads, nodes=getattr(args, "nodes", 1),
        tasks_per_node=getattr(args, "tasks_per_node", None) or 1)


def cmd_run(args) -> int:
    from harness.running.suite import load_suite, run_suite

    suite, source = load_suite(args.suite, args.set)
    if args.fail_fast and args.launcher != "inprocess":
        raise SslBenchError(f"--fail-fast stops a run in this process; jobs of --launcher {args.launcher} run side by "
                            "side: leave out --fail-fast (failed pairs are listed) or use --launcher inprocess")
    if args.device:
        suite.device = args.device
    if args.launcher == "inprocess":
        out = run_suite(suite, source, force=args.force, progress=not args.no_progress, fail_fast=args.fail_fast)
    else:
        from harness.running.launch import default_job_dir, launch_suite

        options = _launch_options(args, default_job_dir(Path(source).stem), suite.device)
        out = launch_suite(suite, source, options, force=args.force, progress=not args.no_progress)
    return 1 if out["failures"] else 0


def cmd_pretrain(args) -> int:
    from harness.config import apply_overrides, load_config
    from harness.training.engine import load_pretrain_config, pretrain

    raw = apply_overrides(load_config(args.config), args.set)
    source = raw.pop("_source_", args.config)
    raw["data"] = {"root": args.data_root, "name": args.data_name or Path(args.data_root).name}
    if args.device:
        raw.setdefault("train", {})["device"] = args.device
    cfg = load_pretrain_config(raw, source)
    if args.launcher != "inprocess":
        return _launch_pretrain(args, cfg, source)
    path = pretrain(cfg, Path(args.out), source, progress=not args.no_progress)
    print(f"checkpoint: {path}")
    return 0


def _launch_pretrain(args, cfg, source: str) -> int:
    from harness.running.launch import launch_pretrain

    options = _launch_options(args, Path(args.out) / "jobs", cfg.train.device)
    outcome = launch_pretrain(cfg, Path(args.out), source, options, nodes=args.nodes,
                              tasks_per_node=args.tasks_per_node, progress=not args.no_progress)
    if not outcome.ok:
        print(f"FAILED: {outcome.failure()}")
        return 1
    print(f"checkpoint: {outcome.value}")
    return 0


def _model(args):
    """The model on the asked device; under torchrun, each process on its own GPU, joined into
    one process group (feature extraction is then sharded over the processes)."""
    from harness.runtime import distributed
    from harness.runtime.device import prepare, resolve_device
    from harness.models.sources import BuildContext, ModelSpec, build_model

    given = [flag for flag, value in (("--model", args.model), ("--checkpoint", args.checkpoint),
                                      ("--random-init", args.random_init)) if value]
    if len(given) != 1:
        raise SslBenchError("give exactly one of --model SPEC, --checkpoint CKPT or --random-init ARCH"
                            + (f" (found {', '.join(given)})" if given else ""))
    device = prepare(resolve_device(args.device))
    distributed.init_from_env(device)
    if args.checkpoint:
        spec = ModelSpec("checkpoint", args.checkpoint)
    elif args.random_init:
        spec = ModelSpec("random_init", args.random_init, {"seed": args.init_seed})
    else:
        spec = args.model
    return build_model(spec, BuildContext(device=str(device), progress=not getattr(args, "no_progress", False)),
                       name=args.name)


def _values(pairs: list[str] | None) -> dict:
    from harness.config import apply_overrides

    return apply_overrides({}, pairs)


def _note_old_dataset_key(name: str) -> None:
    """One line on stderr when --dataset is an old key that names a layout of another data set."""
    from harness.data.catalogue import alias_note

    try:
        note = alias_note(name)
    except SslBenchError:  # a protocol's own name for a data set (not catalogued)
        return
    if note:
        print(note, file=sys.stderr)


DATASET_HELP = "a data set key, or KEY:LAYOUT for one of its layouts (voc, voc:aug, nyu:probe3d: `ssl-bench data list`)"


def cmd_eval(args) -> int:
    from harness.protocol_info import build_protocol
    from harness.running.evaluate import check_input_sizes, evaluate
    from harness.results.leaderboard import build_leaderboard, format_console

    model = _model(args)
    values = {"dataset": args.dataset, **_values(args.set)}  # KEY:LAYOUT: the protocol reads its layout
    if args.lr:  # the mmseg protocols' learning-rate sweep, one or several values
        values["lrs"] = args.lr
    protocol = build_protocol(args.protocol, args.preset, values)
    if not Path(args.data_root).exists():
        raise SslBenchError(f"data root {args.data_root} does not exist")
    check_input_sizes(protocol, model)  # before the data is stamped or earlier records are looked up
    records, skipped = evaluate(model, protocol, Path(args.data_root), preset=args.preset, force=args.force)
    if skipped:
        print("(already measured: showing the stored records; --force to run again)")
    print(format_console(build_leaderboard(records)))
    return 0


def cmd_features(args) -> int:
    from harness.data.transforms import ResizeCenterCrop, PatchMultipleResize
    from harness.features.extract import extract_features
    from harness.data.catalogue import reader_key
    from harness.registry import DATASETS

    model = _model(args)
    _note_old_dataset_key(args.dataset)
    dataset = DATASETS.get(reader_key(args.dataset))(args.data_root, args.split)
    if args.transform == "center_crop":
        transform = ResizeCenterCrop(resize=args.resize, crop=args.crop)
    else:
        transform = PatchMultipleResize(patch_size=model.backbone.patch_size, max_side=args.max_side)
    fs = extract_features(model, dataset, transform, n_last_blocks=args.n_last_blocks,
                          patches=args.patches, batch_size=args.batch_size, num_workers=args.workers)
    state = "cache hit" if fs.from_cache else f"extracted in {fs.seconds:.1f} s"
    print(f"{len(fs)} images, cls {tuple(fs.cls.shape)}, key {fs.key} ({state})")
    return 0


def cmd_leaderboard(args) -> int:
    from harness.results import records as results
    from harness.results.leaderboard import (CHECKS, build_leaderboard, format_console, read_checks,
                                             write_run_leaderboard)
    from harness.paths import results_dir

    runs = Path(args.runs) if args.runs else None
    # built once from the index's number rows (no record parsed), read by every view
    table = build_leaderboard(runs_dir=runs or results.runs_dir())
    if table.empty:
        print(f"no records under {runs or results.runs_dir()}")
        return 1
    from harness.results.pair_status import read_pairs  # the last run's pairs: why an overview cell is empty

    # the last run's pairs and checks, beside its records folder: the files that run wrote, again
    last_run = (runs or results.runs_dir()).parent
    paths = write_run_leaderboard(table, Path(args.out) if args.out else results_dir(),
                                  read_pairs(last_run / "pairs.json"), read_checks(last_run / CHECKS))
    print(format_console(table))
    for kind, p in paths.items():
        print(f"{kind:>12}: {p}")
    return 0


def device_arg(parser, default_from: str = "auto") -> None:
    from harness.runtime import DEVICE_HELP

    parser.add_argument("--device", default=None,
                        help=f"where the work runs: {DEVICE_HELP} (default: {default_from})")


def _launcher_args(q, launcher_help: str) -> None:
    """Options of commands that can run their work as submitit jobs (harness.running.launch)."""
    q.add_argument("--launcher", choices=["inprocess", "local", "slurm"], default="inprocess",
                   help=launcher_help)
    q.add_argument("--job-dir", default=None, help="submitit's files and the job logs")
    q.add_argument("--partition", default=None, help="slurm partition")
    q.add_argument("--time-min", type=int, default=None, help="job time limit in minutes (default 1440)")
    q.add_argument("--gpus-per-node", type=int, default=None,
                   help="slurm: GPUs to request; local: GPUs the jobs see (default all of this machine's)")
    q.add_argument("--cpus-per-task", type=int, default=None)
    q.add_argument("--mem-gb", type=float, default=None)
    q.add_argument("--slurm-extra", action="append", default=[], metavar="KEY=VALUE",
                   help="any other sbatch option, e.g. account=proj (repeatable)")


# The modules that add their own subcommands (``add_cli(subparsers)``), with the commands each adds.
SUBCOMMAND_MODULES = {
    "harness.scaffold": ("new-method", "new-protocol"),
    "harness.models.zoo": ("zoo",),
    "harness.running.reproduce": ("reproduce", "paper"),
    "harness.results.report": ("report",),
    "harness.results.compare": ("compare",),
    "harness.results.explain": ("explain",),
    "harness.context.supervised": ("supervised",),
    "harness.results.records": ("records",),
    "harness.data.cli": ("data",),
}


def cmd_show(args) -> int:
    from harness.paths import results_dir
    from harness.protocol_info import build_protocol
    from harness.running.evaluate import check_input_sizes
    from harness.running.show import show_examples

    if args.count < 1:
        raise SslBenchError(f"--count must be at least 1, found {args.count}")
    model = _model(args)
    protocol = build_protocol(args.protocol, args.preset, {"dataset": args.dataset, **_values(args.set)})
    if not Path(args.data_root).exists():
        raise SslBenchError(f"data root {args.data_root} does not exist")
    check_input_sizes(protocol, model)
    out = Path(args.out) if args.out else results_dir()
    png = show_examples(protocol, model, Path(args.data_root), out, preset=args.preset or protocol.DEFAULT_PRESET,
                        count=args.count, seed=args.seed)
    print(f"show: {png} (listed in {out / 'show' / 'index.json'}; `ssl-bench report` links it)")
    return 0


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The `ssl-bench` parser; ``command``: the command about to run (the parser then holds the
    subcommands of the module that adds it, not every module's); None: every command."""
    p = argparse.ArgumentParser(prog="ssl-bench", description=__doc__)
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    p.add_argument("--pretrain", action="store_true",
                   help=f"with no command: retrain the shipped SynthScenes checkpoints from their recipes and "
                        f"evaluate them beside the shipped ones ({RETRAIN_SUITE}) instead of the default run")
    sub = p.add_subparsers(dest="command")
    _add_run_parser(sub)
    _add_pretrain_parser(sub)
    _add_eval_parser(sub)
    _add_show_parser(sub)
    _add_features_parser(sub)
    _add_leaderboard_parser(sub)
    _add_module_subcommands(sub, command)
    return p


def _add_run_parser(sub) -> None:
    r = sub.add_parser("run", help="run a suite (models x protocols) and print the leaderboard")
    r.add_argument("suite", nargs="?", default=DEFAULT_SUITE)
    r.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="a suite key (device=cpu), or PROTOCOL.KEY=VALUE: a setting of that protocol's "
                        "entries (robustness.crop=56)")
    r.add_argument("--force", action="store_true", help="re-run protocols that have records")
    r.add_argument("--fail-fast", action="store_true",
                   help="stop at the first failing (model, protocol) pair (default: run every pair, list "
                        "the failed ones, exit 1)")
    r.add_argument("--no-progress", action="store_true")
    device_arg(r, "the suite's device key")
    _launcher_args(r, "run the suite in this process, or fan it out as one job per pretraining and "
                     "per (model, protocol)")
    r.add_argument("--max-parallel", type=int, default=None, metavar="N",
                   help="jobs running at once (default: 1 with local, no limit with slurm; 0: no limit)")
    r.add_argument("--nodes", type=int, default=1,
                   help="nodes of each data-parallel job (entries whose protocol trains on every process: finetune)")
    r.add_argument("--tasks-per-node", type=int, default=1,
                   help="processes per node of each data-parallel job, one per GPU (default 1); other jobs are one "
                        "process")
    r.set_defaults(func=cmd_run)


def _add_pretrain_parser(sub) -> None:
    t = sub.add_parser("pretrain", help="pretrain a method; resumes from OUT/resume.pt")
    t.add_argument("config", help="method config, e.g. methods/dino_cpu.yaml")
    t.add_argument("--data-root", required=True)
    t.add_argument("--data-name", default=None)
    t.add_argument("--out", required=True)
    t.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    t.add_argument("--no-progress", action="store_true")
    device_arg(t, "the config's train.device")
    _launcher_args(t, "train in this process (torchrun for several), or as one submitit job of "
                     "--nodes x --tasks-per-node data-parallel tasks")
    t.add_argument("--nodes", type=int, default=1)
    t.add_argument("--tasks-per-node", type=int, default=None,
                   help="processes per node (default: one per GPU of --gpus-per-node, else 1)")
    t.set_defaults(func=cmd_pretrain)


def _model_args(q) -> None:
    device_arg(q)
    q.add_argument("--model", metavar="SPEC",
                   help="any model: zoo:NAME, checkpoint:PATH, random_init:ARCH, timm:NAME[,weights=FILE], "
                        "hf:FOLDER, hub:REPO_DIR:ENTRY,weights=FILE, code:FILE.py:FUNCTION "
                        "(docs/MODELS.md)")
    q.add_argument("--checkpoint", help="harness checkpoint (.safetensors)")
    q.add_argument("--random-init", metavar="ARCH", help="evaluate a randomly initialised ARCH")
    q.add_argument("--init-seed", type=int, default=0)
    q.add_argument("--name", default=None, help="model name in records")


def _add_eval_parser(sub) -> None:
    e = sub.add_parser("eval", help="run one protocol on one model")
    e.add_argument("--protocol", required=True)
    e.add_argument("--preset", default=None)
    e.add_argument("--dataset", required=True,
                   help=DATASET_HELP)
    e.add_argument("--data-root", required=True)
    _model_args(e)
    e.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="protocol setting, e.g. k=20")
    e.add_argument("--lr", type=float, action="append", default=None,
                   help="seg_linear/segmenter: learning rate(s) to run instead of the preset's sweep")
    e.add_argument("--force", action="store_true")
    e.set_defaults(func=cmd_eval)


def _add_show_parser(sub) -> None:
    s = sub.add_parser("show", help="draw a few of a protocol's examples on a model (input, target, prediction) "
                                    "into the report's folder")
    s.add_argument("protocol")
    s.add_argument("--preset", default=None)
    s.add_argument("--dataset", required=True,
                   help=DATASET_HELP)
    s.add_argument("--data-root", required=True)
    _model_args(s)
    s.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="protocol setting")
    s.add_argument("--count", type=int, default=4, help="examples to draw (default 4)")
    s.add_argument("--seed", type=int, default=0, help="which examples: drawn with this seed")
    s.add_argument("--out", default=None, help="the report's folder (default results/)")
    s.set_defaults(func=cmd_show)


def _add_features_parser(sub) -> None:
    f = sub.add_parser("features", help="extract (and cache) features")
    f.add_argument("--dataset", required=True,
                   help=DATASET_HELP)
    f.add_argument("--data-root", required=True)
    f.add_argument("--split", required=True)
    _model_args(f)
    f.add_argument("--transform", choices=["center_crop", "patch_multiple"], default="center_crop")
    f.add_argument("--resize", type=int, default=256)
    f.add_argument("--crop", type=int, default=224)
    f.add_argument("--max-side", type=int, default=None)
    f.add_argument("--n-last-blocks", type=int, default=1)
    f.add_argument("--patches", action="store_true")
    f.add_argument("--batch-size", type=int, default=64)
    f.add_argument("--workers", type=int, default=0)
    f.set_defaults(func=cmd_features)


def _add_leaderboard_parser(sub) -> None:
    lb = sub.add_parser("leaderboard", help="build leaderboard files from result records")
    lb.add_argument("--runs", default=None, help="records folder (default results/runs)")
    lb.add_argument("--out", default=None, help="output folder (default results/)")
    lb.set_defaults(func=cmd_leaderboard)


def _add_module_subcommands(sub, command: str | None) -> None:
    # Modules with their own subcommands add them; for one known command only its module is
    # imported (`leaderboard`, `report`, `records` then import neither torch nor timm).
    # An unknown command gets every module's, so that argparse lists them all.
    known = command in sub.choices or any(command in commands for commands in SUBCOMMAND_MODULES.values())
    for module, commands in SUBCOMMAND_MODULES.items():
        if command is None or command in commands or not known:
            importlib.import_module(module).add_cli(sub)


def _announce_retraining(suite_path: str) -> None:
    """Say, before any work, how long the zoo checkpoints a suite retrains took to make."""
    from harness.running.suite import load_suite
    from harness.models.zoo import load_zoo

    suite, _ = load_suite(suite_path)
    zoo = load_zoo()
    made = [zoo[m.zoo] for m in suite.models if m.zoo and m.zoo in zoo and zoo[m.zoo].provenance]
    seconds = sum(float(e.provenance.get("wall_s") or 0) for e in made)
    cpus = sorted({str(e.provenance.get("cpu")) for e in made})
    print(f"Retraining {len(made)} SynthScenes checkpoints from their recipes: they took {seconds / 60:.0f} min "
          f"to train when they were made ({', '.join(cpus)}); expect about as long on 2 idle CPU cores, "
          f"plus the evaluations. After the run each NAME_retrained is compared with NAME cell by cell, within "
          f"the retrain-to-retrain spread the suite's retrain_check names.", flush=True)


# options of the top-level parser itself; everything else before a command belongs to `run`
_TOP_LEVEL_FLAGS = {"--pretrain", "-h", "--help"}
_TOP_LEVEL_WITH_VALUE = {"--threads"}


def split_top_level(argv: list[str]) -> tuple[list[str], list[str]]:
    """(the top-level options at the front of argv, the rest)."""
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg in _TOP_LEVEL_FLAGS or arg.split("=", 1)[0] in _TOP_LEVEL_WITH_VALUE and "=" in arg:
            i += 1
        elif arg in _TOP_LEVEL_WITH_VALUE:
            i += 2
        else:
            break
    return argv[:i], argv[i:]


def parse_command_line(parser: argparse.ArgumentParser, argv: list[str]) -> argparse.Namespace:
    """Parse argv; without a command it is the default run, and the options after the
    top-level ones are `run`'s (so `ssl-bench --no-progress` is `ssl-bench run --no-progress`)."""
    top, rest = split_top_level(argv)
    if rest and not rest[0].startswith("-"):
        return parser.parse_args(argv)
    top_args = parser.parse_args(top)
    suite = RETRAIN_SUITE if top_args.pretrain else DEFAULT_SUITE
    if top_args.pretrain:
        _announce_retraining(RETRAIN_SUITE)
    return parser.parse_args([a for a in top if a != "--pretrain"] + ["run", suite] + rest)


def command_of(argv: list[str]) -> str | None:
    """The command argv runs ("run" without one); None when it only asks for help."""
    top, rest = split_top_level(argv)
    if rest and not rest[0].startswith("-"):
        return rest[0]
    return None if any(a in ("-h", "--help") for a in top) and not rest else "run"


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser(command_of(argv))
    try:
        args = parse_command_line(parser, argv)  # `--pretrain` reads its suite here: a bad one is an error line
        _threads(args.threads)
        return args.func(args)
    except SslBenchError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
