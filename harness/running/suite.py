"""A suite = models x protocols, from YAML. The default suite is what
``python run_benchmark.py`` runs: generate SynthScenes (cached), pretrain every listed
method briefly (checkpoints cached by configuration), evaluate every protocol, and
write the leaderboard."""
from __future__ import annotations

import dataclasses
import json
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.config import apply_overrides, from_dict, load_config
from harness.runtime.device import prepare, resolve_device
from harness.errors import ConfigError, NotApplicable, SslBenchError
from harness.protocol_info import build_protocol
from harness.running.evaluate import evaluate
from harness.results.pair_status import CACHED, FAILED, MEASURED, NOT_APPLICABLE, PairStatus, one_line, pair_label
from harness.results.margins import MarginSpec, check_margins, format_margins, margins_failed
from harness.results.retrain_check import RetrainCheckSpec, check_retrains, format_retrain_check, load_spread
from harness.models.handle import ModelHandle
from harness.models.sources import BuildContext, ModelSpec, build_model, parse_spec, source_inputs
from harness.paths import results_dir
from harness.context.supervised_source import suite_supervised_checkpoint, validated_supervised_spec
from harness.training.cached_pretrain import cached_checkpoint, pretrain_config, pretrained_checkpoint  # noqa: F401
from harness.running.model_memo import DeferredModel, ModelMemo, StaleMemoError, memo_key

if TYPE_CHECKING:
    import pandas as pd


@dataclass
class SynthSpec:
    preset: str = "small"
    seed: int = 0
    root: str | None = None  # default: the cache location for (preset, seed)


@dataclass
class ModelEntry:
    name: str
    # any model through the front door (harness.models.sources): a spec string or mapping,
    # e.g. "timm:resnet18,weights=r18.safetensors"; the fields below are its older spellings
    model: Any = None
    random_init: dict[str, Any] | None = None  # {arch, seed}
    pretrain: str | None = None  # a method config file (configs/methods/...)
    set: list[str] = field(default_factory=list)  # overrides for the pretraining config
    checkpoint: str | None = None  # an existing harness checkpoint
    zoo: str | None = None  # a zoo checkpoint: shipped with ssl-bench, or imported (`ssl-bench zoo`)
    # context rows (harness.context): the raw-pixel baseline {patch_size}, the supervised
    # reference (a SupervisedSpec: arch, steps, batch_size, lr, seed, ...), chance ({})
    pixels: dict[str, Any] | None = None
    supervised: dict[str, Any] | None = None
    chance: dict[str, Any] | None = None


@dataclass
class ProtocolEntry:
    name: str
    dataset: str
    data_root: str = "{synth}"
    preset: str | None = None
    set: dict[str, Any] = field(default_factory=dict)
    requires: list[str] = field(default_factory=list)  # importable modules; skipped if absent
    models: list[str] | None = None  # the suite's models (by name) it runs on; default every one


@dataclass
class SuiteConfig:
    synth: SynthSpec | None = None
    device: str = "auto"  # where every model pretrains and runs (harness.runtime.device)
    pretrain_data: str = "{synth}"
    pretrain_overrides: list[str] = field(default_factory=list)  # applied to every pretrained model
    models: list[ModelEntry] = field(default_factory=list)
    protocols: list[ProtocolEntry] = field(default_factory=list)
    # checks printed after the leaderboard: margins over reference rows (harness.results.margins), and
    # paper tables (configs/paper/) whose cells the suite's records reproduce; a failed cell
    # fails the run, a missed margin is reported
    margins: MarginSpec | None = None
    reproduce: list[str] = field(default_factory=list)
    # retrained models beside the shipped ones they retrain, within the measured retrain-to-retrain
    # spread (harness.results.retrain_check); cells outside it are reported, not failures
    retrain_check: RetrainCheckSpec | None = None
    # where `zoo:` models are looked up beyond the shipped zoo (imported checkpoints, an entries file)
    zoo_dir: str | None = None
    zoo_path: str | None = None


def load_suite(path: str | Path, overrides: list[str] | None = None) -> tuple[SuiteConfig, str]:
    """A suite file with ``overrides``: ``key.path=value`` of the suite itself, or
    ``PROTOCOL.key=value``, a setting of every entry of that protocol (what its errors suggest,
    e.g. ``robustness.crop=56``), added to the entries' ``set``."""
    raw = load_config(path)
    suite_items, protocol_items = _split_overrides(raw, overrides or [])
    raw = apply_overrides(raw, suite_items)
    for entry in raw.get("protocols") or []:
        mine = [item.split(".", 1)[1] for item in protocol_items if item.split(".", 1)[0].strip() == entry.get("name")]
        if mine:
            entry["set"] = apply_overrides(dict(entry.get("set") or {}), mine)
    source = raw.get("_source_", str(path))
    suite = from_dict(SuiteConfig, raw, source)
    if suite.retrain_check is not None:
        load_spread(suite.retrain_check)  # a changed or inconsistent spread file: an error before any work
    return suite, source


def _split_overrides(raw: dict, overrides: list[str]) -> tuple[list[str], list[str]]:
    """(the suite's own overrides, the protocols' ones): an override whose first key names a
    protocol of the suite, not a suite key, is that protocol's setting."""
    suite_keys = {f.name for f in dataclasses.fields(SuiteConfig)}
    protocols = {p.get("name") for p in raw.get("protocols") or [] if isinstance(p, dict)}
    own, theirs = [], []
    for item in overrides:
        head = item.split("=", 1)[0].split(".", 1)[0].strip()
        if head in suite_keys or "=" not in item:
            own.append(item)
        elif head in protocols and "." in item.split("=", 1)[0]:
            theirs.append(item)
        else:
            raise ConfigError(f"--set {item}: {head!r} is neither a suite key ({', '.join(sorted(suite_keys))}) "
                              f"nor a protocol of the suite ({', '.join(sorted(map(str, protocols))) or 'none'}); "
                              "a protocol's setting is --set PROTOCOL.KEY=VALUE, e.g. --set robustness.crop=56")
    return own, theirs


def _importable(module: str) -> bool:
    """Whether ``module`` can be imported, found without importing it or its parents (mmcv's
    package import alone takes longer than a cached run's bookkeeping)."""
    import importlib.machinery
    import importlib.util
    import sys

    if module in sys.modules:
        return True
    parts = module.split(".")
    try:
        spec = importlib.util.find_spec(parts[0])
        for depth in range(1, len(parts)):
            if spec is None or spec.submodule_search_locations is None:
                return False
            name = ".".join(parts[:depth + 1])
            if ".".join(parts[:depth]) in sys.modules:  # an imported parent knows its own search path
                spec = importlib.util.find_spec(name)
            else:
                spec = importlib.machinery.PathFinder.find_spec(name, list(spec.submodule_search_locations))
    except (ImportError, ValueError):
        return False
    return spec is not None


def _fill(template: str, synth_root: Path | None, synth: SynthSpec | None = None) -> str:
    """A data root with ``{synth}`` (SynthScenes) and ``{synth:<protocol>}`` (a protocol's own
    SynthScenes set, harness.data.declared_synthetic) filled in."""
    if "{synth:" in template:
        from harness.data.declared_synthetic import fill_declared

        template = fill_declared(template, synth.preset if synth else None, synth.seed if synth else None)
    if "{synth}" in template:
        if synth_root is None:
            raise ConfigError(f"{template!r} refers to {{synth}} but the suite has no synth section")
        return template.replace("{synth}", str(synth_root))
    return template


def _spelled_out(entry: ModelEntry) -> ModelEntry:
    """A ``model:`` spec of a source that trains on the suite's data, as its own field: the
    launcher plans those trainings as jobs of their own (harness.running.launch)."""
    if entry.model is None:
        return entry
    spec = parse_spec(entry.model, entry.name)
    if spec.source == "pretrain":
        return dataclasses.replace(entry, model=None, pretrain=spec.target, set=list(spec.options.get("set") or []))
    if spec.source == "supervised":
        return dataclasses.replace(entry, model=None, supervised=dict(spec.options))
    return entry


def model_entries(suite: SuiteConfig) -> list[ModelEntry]:
    """The suite's models, each pretraining entry with the suite-wide overrides first."""
    entries = [_spelled_out(e) for e in suite.models]
    if not suite.pretrain_overrides:
        return entries
    return [dataclasses.replace(e, set=list(suite.pretrain_overrides) + list(e.set)) if e.pretrain else e
            for e in entries]


def suite_protocol(entry: ProtocolEntry, source: str, progress: bool = True):
    """The protocol object of one suite entry (its preset, its dataset and settings). Without
    ``progress`` a protocol that draws progress bars draws none (not in any fingerprint)."""
    protocol = build_protocol(entry.name, entry.preset, {"dataset": entry.dataset, **entry.set}, source)
    if not progress and "progress" in {f.name for f in dataclasses.fields(protocol.cfg)}:
        protocol.cfg = dataclasses.replace(protocol.cfg, progress=False)
    return protocol


# ----------------------------------------------------------------------------- the steps of a run
# run_suite calls these one after another in this process; harness.running.launch calls the same
# functions inside separate jobs, so both ways of running share one definition of each step.

@dataclass
class SuiteData:
    """Where a suite's inputs live, resolved once (and SynthScenes generated) before any work:
    its data, and the folder and entries file its `zoo:` models are found in."""
    synth_root: Path | None
    pretrain_root: Path | None
    pretrain_name: str
    zoo_dir: Path | None = None
    zoo_path: Path | None = None
    synth: SynthSpec | None = None

    def fill(self, template: str) -> str:
        return _fill(template, self.synth_root, self.synth)


def prepare_data(suite: SuiteConfig, progress: bool = True, log=print) -> SuiteData:
    """Generate SynthScenes (cached) and resolve the pretraining data of a suite."""
    synth_root = None
    if suite.synth is not None:
        from harness.data.synthetic import default_root, generate

        synth_root = Path(suite.synth.root) if suite.synth.root else default_root(suite.synth.preset,
                                                                                   suite.synth.seed)
        log(f"SynthScenes ({suite.synth.preset}, seed {suite.synth.seed}) at {synth_root}")
        generate(synth_root, preset=suite.synth.preset, seed=suite.synth.seed, progress=progress)
    pre_root = Path(_fill(suite.pretrain_data, synth_root)) if suite.pretrain_data else None
    pre_name = f"synthscenes-{suite.synth.preset}" if suite.synth and "{synth}" in suite.pretrain_data \
        else str(pre_root)
    return SuiteData(synth_root, pre_root, pre_name, Path(suite.zoo_dir) if suite.zoo_dir else None,
                     Path(suite.zoo_path) if suite.zoo_path else None, suite.synth)


MODEL_KINDS = ("model", "random_init", "pretrain", "checkpoint", "zoo", "pixels", "supervised", "chance")


def supervised_spec(entry: ModelEntry):
    """The validated SupervisedSpec of a `supervised:` entry (unknown keys are an error)."""
    return validated_supervised_spec(entry.supervised, entry.name)


def supervised_checkpoint_for(entry: ModelEntry, data: SuiteData, progress: bool = True, log=print,
                              device: str = "auto") -> Path:
    """Train (or reuse the cached) supervised reference of one entry."""
    return suite_supervised_checkpoint(supervised_spec(entry), data, progress, log, device)


def check_model_entry(entry: ModelEntry, data: SuiteData) -> None:
    chosen = [k for k in MODEL_KINDS if getattr(entry, k) is not None and getattr(entry, k) != ""]
    if len(chosen) != 1:
        raise ConfigError(f"model {entry.name!r} needs exactly one of {' / '.join(MODEL_KINDS)}, "
                          f"found {chosen or 'none'}")
    if entry.pretrain and data.pretrain_root is None:
        raise ConfigError(f"model {entry.name!r} needs pretraining data (suite pretrain_data)")
    if entry.pixels is not None and set(entry.pixels) - {"patch_size"}:
        raise ConfigError(f"model {entry.name!r}: pixels takes only patch_size, found {sorted(entry.pixels)}")
    if entry.chance is not None and entry.chance:
        raise ConfigError(f"model {entry.name!r}: chance takes no settings (write chance: {{}}), "
                          f"found {sorted(entry.chance)}")
    if entry.supervised is not None:
        supervised_spec(entry)
    if entry.model is not None:
        parse_spec(entry.model, entry.name)


def entry_spec(entry: ModelEntry) -> ModelSpec:
    """The model spec of a suite entry, whichever way the entry spells it."""
    if entry.model is not None:
        return parse_spec(entry.model, entry.name)
    if entry.random_init is not None:
        opts = dict(entry.random_init)
        return ModelSpec("random_init", str(opts.pop("arch", "vit_cpu_tiny")), opts, entry.name)
    if entry.pixels is not None:
        return ModelSpec("pixels", "", dict(entry.pixels), entry.name)
    if entry.chance is not None:
        return ModelSpec("chance", "", {}, entry.name)
    if entry.supervised is not None:
        return ModelSpec("supervised", "", dict(entry.supervised), entry.name)
    if entry.checkpoint:
        return ModelSpec("checkpoint", str(entry.checkpoint), {}, entry.name)
    if entry.zoo:
        return ModelSpec("zoo", str(entry.zoo), {}, entry.name)
    return ModelSpec("pretrain", str(entry.pretrain), {"set": list(entry.set)}, entry.name)


def prepare_model(entry: ModelEntry, data: SuiteData, progress: bool = True, log=print,
                  device: str = "auto") -> ModelHandle:
    """The model of one suite entry on `device`: built, loaded, or pretrained there
    (checkpoints cached), through the one front door (harness.models.sources)."""
    check_model_entry(entry, data)
    return build_model(entry_spec(entry), _build_context(data, progress, log, device))


def _build_context(data: SuiteData, progress: bool, log, device: str) -> BuildContext:
    return BuildContext(device=device, progress=progress, log=log, data=data, zoo_dir=data.zoo_dir,
                        zoo_path=data.zoo_path)


def remembered_or_built(entry: ModelEntry, data: SuiteData, protocols: list, progress: bool = True, log=print,
                        device: str = "auto") -> tuple[ModelHandle | DeferredModel, ModelMemo | None]:
    """(model, its memo) of one suite entry: a DeferredModel when its identity is remembered
    (harness.running.model_memo; built only when a protocol measures it), else the model built
    now, its identity and ``protocols``' settings for it then remembered when its source states
    its inputs (memo None when it cannot)."""
    check_model_entry(entry, data)
    spec, ctx = entry_spec(entry), _build_context(data, progress, log, device)
    try:
        inputs = source_inputs(spec, ctx)
    except (SslBenchError, OSError):  # building it says what is wrong, in the source's words
        inputs = None
    memo = None
    if inputs is not None:
        memo = ModelMemo(memo_key(json.dumps(dataclasses.asdict(spec), sort_keys=True, default=str),
                                  resolve_device(device).type, inputs))
        remembered = memo.read()
        if remembered is not None and remembered["record_info"].get("name") == entry.name:
            return DeferredModel(memo, remembered, device, lambda: build_model(spec, ctx)), memo
    model = build_model(spec, ctx)
    if memo is not None:
        memo.write(model, protocols)
    return model, memo


def suite_pairs(protocols: list[ProtocolEntry], models: list) -> list[tuple[ProtocolEntry, Any]]:
    """The (protocol entry, model) pairs a run evaluates, in its order: protocol by protocol,
    each on the models it names (every model when it names none). ``models``: entries or handles."""
    names = {m.name for m in models}
    for p in protocols:
        unknown = sorted(set(p.models or []) - names)
        if unknown:
            raise ConfigError(f"protocol {p.name!r} names models the suite does not have: {unknown}")
    return [(p, m) for p in protocols for m in models if p.models is None or m.name in p.models]


def runnable_protocols(suite: SuiteConfig, log=print) -> list[ProtocolEntry]:
    """The suite's protocol entries whose optional dependencies are installed."""
    runnable = []
    for p in suite.protocols:
        missing = [m for m in p.requires if not _importable(m)]
        if missing:
            log(f"skipping protocol {p.name}: needs {', '.join(missing)} ({_install_hint(missing)})")
            continue
        runnable.append(p)
    return runnable


# how to install an optional dependency a suite's protocol names in ``requires``
_MMCV_HINT = "install with: bash scripts/install_mmcv.sh"
_INSTALL_HINTS = {"mmseg": _MMCV_HINT, "mmcv": _MMCV_HINT, "mmdet": _MMCV_HINT, "pycocotools": _MMCV_HINT,
                  "cyanure": "install with: pip install -e \".[logreg]\""}


def _install_hint(missing: list[str]) -> str:
    hints = dict.fromkeys(_INSTALL_HINTS.get(m.split(".")[0], f"install {m}") for m in missing)
    return "; ".join(hints)


@dataclass
class EvalOutcome:
    """What evaluating one (model, protocol entry) gave; travels back from a job by pickle."""
    protocol: str
    preset: str | None
    model: str
    records: list[dict]
    skipped: bool
    seconds: float
    not_applicable: str | None = None  # why the protocol cannot measure this model (NotApplicable)

    def status(self) -> PairStatus:
        if self.not_applicable:
            return PairStatus(self.model, self.protocol, self.preset, NOT_APPLICABLE, self.not_applicable)
        return PairStatus(self.model, self.protocol, self.preset, CACHED if self.skipped else MEASURED)

    def summary(self) -> str:
        if self.not_applicable:
            return f"[{self.protocol}/{self.preset or '-'}] {self.model}: skipped ({self.not_applicable})"
        state = "cached" if self.skipped else f"{self.seconds:.0f} s"
        return f"[{self.protocol}/{self.preset or '-'}] {self.model}: {len(self.records)} record(s) ({state})"


def evaluate_entry(model: ModelHandle, entry: ProtocolEntry, data: SuiteData, source: str,
                   force: bool = False, protocol=None, runs_dir: Path | None = None) -> EvalOutcome:
    """Run (or reuse the records of) one protocol entry on one model."""
    protocol = protocol or suite_protocol(entry, source)
    t0 = time.perf_counter()
    try:
        records, skipped = evaluate(model, protocol, Path(data.fill(entry.data_root)), preset=entry.preset,
                                    runs_dir=runs_dir, force=force)
    except NotApplicable as exc:  # e.g. an mmseg protocol and the raw-pixel baseline: no number, no failure
        return EvalOutcome(entry.name, entry.preset, model.name, [], True, time.perf_counter() - t0, str(exc))
    return EvalOutcome(entry.name, entry.preset, model.name, records, skipped, time.perf_counter() - t0)


def report_tables(suite: SuiteConfig | None) -> list[str] | None:
    """The published tables a run's report compares with: the suite's ``reproduce`` tables,
    else every table (None)."""
    return (suite.reproduce or None) if suite is not None else None


def suite_checks(suite: SuiteConfig | None, records: list[dict],
                 paper: pd.DataFrame | None = None) -> tuple[list[str], list[str]]:
    """(text blocks, failures) of the suite's margins and reproduced paper tables. ``paper``:
    the run's paper cells (harness.paper.verdict.all_paper_cells) when already computed."""
    from harness.paper.spec import load_table
    from harness.paper.verdict import exit_status, format_comparison, paper_cells, records_by_model, tolerance_lines

    blocks, failed = [], []
    if suite is not None and suite.margins is not None:
        rows = check_margins(suite.margins, records)
        missed = margins_failed(rows)
        blocks.append(format_margins(suite.margins, rows))
        blocks.append("\n".join(["margins missed (reported, not a failure of the run):", *missed])
                      if missed else "every margin met")
    if suite is not None and suite.retrain_check is not None:
        spec = suite.retrain_check
        spread = load_spread(spec)
        blocks.append(format_retrain_check(spread, check_retrains(spread, records, spec.suffix), spec.spread))
    by_model = records_by_model(records)
    for table in (suite.reproduce if suite is not None else []):
        tab = load_table(table)
        if paper is not None and len(paper) and tab.name in set(paper["table_name"]):
            cells = paper[paper["table_name"] == tab.name].reset_index(drop=True)
        else:
            cells = paper_cells(table, records, by_model)
        blocks.append(format_comparison(cells, f"{tab.spec.title}: measured vs published",
                                        tolerances=tolerance_lines(tab)))
        if exit_status(cells):
            bad = cells[cells["outcome"] == "fail"]
            failed += [f"{table}: {r.zoo_name} {r.protocol} {r.dataset} {r.variant} {r.metric}: {r.verdict}"
                       for r in bad.itertuples()] or [f"{table}: no cell was measured"]
    return blocks, failed


def finish_suite(records: list[dict], failures: list[str], t0: float, out_dir: Path | None = None,
                 log=print, suite: SuiteConfig | None = None, pairs: list[PairStatus] | None = None) -> dict[str, Any]:
    """Write and print the leaderboard of a run's records, the suite's checks, the pairs that gave
    no number (``pairs``: every pair's PairStatus; failed and not-applicable ones are listed), then
    its failures. The leaderboard (one RunTable) and the paper cells are computed once and shared by
    the console, the files, the checks and the report. The leaderboard files are written as
    `ssl-bench leaderboard` writes them again from the records folder (harness.results.leaderboard.
    write_run_leaderboard), with the checks and pairs this run keeps beside it."""
    from harness.paper.verdict import all_paper_cells
    from harness.results.leaderboard import CHECKS, format_console, write_checks, write_run_leaderboard
    from harness.results.pair_status import console_block, write_pairs
    from harness.results.run_table import table_of_records

    out = Path(out_dir or results_dir())
    pairs = list(pairs or [])
    table = table_of_records(records, kept_in=out / "runs")  # intervals kept beside the records' index
    shown = pairs + table.no_number  # and the parts of pairs that have no number
    paper = None
    if len(table):
        tables = report_tables(suite)
        try:
            paper = all_paper_cells(records, tables)
        except Exception as exc:  # noqa: BLE001 - the checks below compute what they need themselves
            log(f"(paper cells not computed: {type(exc).__name__}: {exc})")
    blocks, failed = suite_checks(suite, records, paper) if len(table) else ([], [])
    failures = failures + failed
    paths = write_run_leaderboard(table, out, pairs, blocks) if len(table) else {}
    if len(table):  # what `ssl-bench leaderboard` reads back to write these files again
        paths["checks"] = write_checks(out / CHECKS, blocks)
    if pairs:
        out.mkdir(parents=True, exist_ok=True)
        paths["pairs"] = write_pairs(out / "pairs.json", pairs)
    if len(table):
        from harness.results.report import write_report

        try:  # the page is a view of the records: failing to draw it must not fail the run
            paths["report"] = write_report(out / "report.html", records, paper_tables=report_tables(suite),
                                           table=table, paper=paper, pairs=shown)
        except Exception as exc:  # noqa: BLE001
            log(f"(report.html not written: {type(exc).__name__}: {exc}; `ssl-bench report` retries)")
    log("")
    log(format_console(table) if len(table) else "(no results)")
    log("")
    for block in blocks + [console_block(shown)]:
        if block:
            log(block)
            log("")
    for kind, path in paths.items():
        log(f"{kind:>12}: {path}")
    log(f"total time {time.perf_counter() - t0:.0f} s; records in {out / 'runs'}")
    if failures:
        log("FAILED parts:\n  " + "\n  ".join(failures))
    return {"records": records, "paths": paths, "failures": failures, "pairs": pairs}


@dataclass
class PairResult:
    """One (protocol entry, model) pair of a run: its outcome, or the error that stopped it
    (the model's, when the model could not be prepared)."""
    protocol: ProtocolEntry
    model: str
    outcome: EvalOutcome | None = None
    error: BaseException | None = None
    error_line: str = ""  # the error in one line, naming what failed (the model, the protocol entry)

    def status(self) -> PairStatus:
        if self.outcome is not None:
            return self.outcome.status()
        return PairStatus(self.model, self.protocol.name, self.protocol.preset, FAILED, self.error_line,
                          refused=isinstance(self.error, SslBenchError))


@dataclass
class SuiteRun:
    """What executing a suite gave: every record, the failures in words, and each pair's result."""
    records: list[dict]
    failures: list[str]
    pairs: list[PairResult]

    def statuses(self) -> list[PairStatus]:
        return [p.status() for p in self.pairs]


def execute_suite(suite: SuiteConfig, source: str, *, force: bool = False, progress: bool = True,
                  log=print, runs_dir: Path | None = None, fail_fast: bool = False,
                  prepared: dict[str, ModelHandle] | None = None) -> SuiteRun:
    """Every evaluation of a suite in this process: the data, then each model, then each
    (protocol entry, model) pair. A malformed model entry is an error before any work; after that
    every pair it can is run: a protocol entry, a model or a pair that fails stays with its pairs,
    its error in one line naming them, and the run goes on, unless ``fail_fast``, when the first
    failure stops it (an SslBenchError naming the pair). ``prepared``: models already built, by
    name (they are not built again)."""
    prepare(resolve_device(suite.device))  # a clear error before any work when it cannot be had
    data = prepare_data(suite, progress, log)
    entries = model_entries(suite)
    for entry in entries:
        if entry.name not in (prepared or {}):
            check_model_entry(entry, data)
    pairs = suite_pairs(runnable_protocols(suite, log), entries)
    errors: dict[Any, tuple[BaseException, str]] = {}  # by id(protocol entry) or model name
    failures: list[str] = []
    fail = _Failures(fail_fast, failures, log)
    protocols = _suite_protocols(pairs, source, progress, fail, errors)
    models = dict(prepared or {})
    memos = _suite_models(suite, entries, data, protocols, models, progress, log, fail, errors)
    results: list[PairResult] = []
    records: list[dict] = []
    for p, entry in pairs:
        result = PairResult(p, entry.name)
        error = errors.get(entry.name, errors.get(id(p)))
        if error is not None:
            result.error, result.error_line = error
        results.append(result)
        if result.error is None:
            _evaluate_pair(result, models[entry.name], p, data, source, force, protocols[id(p)], runs_dir, fail)
        if result.outcome is not None:
            records += result.outcome.records
            log(result.outcome.summary())
    for name, memo in memos.items():  # a remembered model built for a protocol it had no settings for
        model = models[name]
        if isinstance(model, DeferredModel) and model.built \
                and any(model.known_settings(p) is None for p in protocols.values()):
            memo.write(model.model(), list(protocols.values()))
    return SuiteRun(records, failures, results)


@dataclass
class _Failures:
    """Where a run's failures go: one line each into ``failures`` (the traceback logged for an
    error that is not ssl-bench's own), or, with ``fail_fast``, the first one raised."""
    fail_fast: bool
    failures: list[str]
    log: Any

    def keep(self, label: str, exc: BaseException, reason_prefix: str = "") -> str:
        """The failure of ``label`` (what failed: a pair, a model, a protocol entry); returns the
        reason its pairs show (``reason_prefix`` names what failed when it is not the pair)."""
        if isinstance(exc, StaleMemoError):  # pairs before it may have reused records under the wrong identity
            raise exc
        line = f"{label}: {one_line(exc)}"
        if not isinstance(exc, SslBenchError):
            self.log(traceback.format_exc())
        if self.fail_fast:
            raise SslBenchError(f"{line} (--fail-fast: the run stopped at this first failure)") from exc
        self.failures.append(line)
        self.log(f"FAILED {line}")
        return reason_prefix + one_line(exc)


def _suite_protocols(pairs, source: str, progress: bool, fail: _Failures, errors: dict) -> dict[int, Any]:
    """Each protocol entry built once, before any model is (by id of the entry)."""
    protocols: dict[int, Any] = {}
    for p in dict((id(p), p) for p, _ in pairs).values():
        try:
            protocols[id(p)] = suite_protocol(p, source, progress)
        except SslBenchError as exc:
            label = f"protocol {p.name}{'/' + p.preset if p.preset else ''}"
            errors[id(p)] = exc, fail.keep(label, exc, f"{label}: ")
    return protocols


def _suite_models(suite: SuiteConfig, entries: list[ModelEntry], data: SuiteData, protocols: dict, models: dict,
                  progress: bool, log, fail: _Failures, errors: dict) -> dict[str, ModelMemo]:
    """Build (or remember) every model not in ``models`` yet, into it; their memos by name."""
    memos: dict[str, ModelMemo] = {}
    for entry in entries:
        if entry.name in models:
            continue
        try:
            models[entry.name], memo = remembered_or_built(entry, data, list(protocols.values()), progress, log,
                                                           suite.device)
            if memo is not None:
                memos[entry.name] = memo
        except Exception as exc:  # its pairs fail; the other models' go on
            errors[entry.name] = exc, fail.keep(f"model {entry.name}", exc, f"model {entry.name}: ")
    return memos


def _evaluate_pair(result: PairResult, model, p: ProtocolEntry, data: SuiteData, source: str, force: bool, protocol,
                   runs_dir: Path | None, fail: _Failures) -> None:
    """One (protocol entry, model) pair into ``result``: its outcome, or its error."""
    try:
        result.outcome = evaluate_entry(model, p, data, source, force, protocol, runs_dir)
    except Exception as exc:
        result.error, result.error_line = exc, fail.keep(pair_label(p.name, p.preset, result.model), exc)


def run_suite(suite: SuiteConfig, source: str, *, force: bool = False, progress: bool = True,
              out_dir: Path | None = None, log=print, fail_fast: bool = False) -> dict[str, Any]:
    """Every step in this process (`--launcher inprocess`); harness.running.launch runs them as jobs.
    A failing pair is kept as failed and the run goes on; ``fail_fast`` stops at the first."""
    t0 = time.perf_counter()
    run = execute_suite(suite, source, force=force, progress=progress, log=log, fail_fast=fail_fast)
    return finish_suite(run.records, run.failures, t0, out_dir, log, suite, pairs=run.statuses())
