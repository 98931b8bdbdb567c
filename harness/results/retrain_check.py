"""Retrained models beside the shipped checkpoints they retrain, judged by the measured spread.

A shipped checkpoint is one training; retraining it from its recorded command on another machine
(other CPU kernels) or with another seed is another, and the two differ by more than evaluating one
file on two machines does. A suite's ``retrain_check:`` names a spread file (written by
``python -m scripts.retrain_spread``): for each of several recipes, the shipped file and
retrainings of its recorded command, evaluated on the suite's protocols, and per (protocol, metric)
the tolerance derived from them by the rule the file states (``derive_tolerance``): the largest
difference between two runs of one recipe, over every recipe measured. Every model
``<name><suffix>`` whose ``<name>`` the run also measured is compared with it on every (protocol,
dataset, split, variant, metric) either measured (harness.results.compare.compare_runs: means over
seeds, B - A); a cell is inside iff |retrained - shipped| <= the tolerance
(harness.paper.verdict.verdict). Cells outside are reported, not failures of the run: the spread
is measured on a few trainings of a few recipes, so a cell outside it says "look here", not "the
harness is broken" (the shipped files' own table fails the run).

The spread file is pinned by its sha256 in the suite, so a changed byte is an error; its schema
has no optional field, and its tolerances must follow from its measurements by its rule.
"""
from __future__ import annotations

import itertools
import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from harness.config import from_dict, resolve_config_path
from harness.errors import ConfigError
from harness.io_utils import sha256_file
from harness.text_table import text_table
from harness.yaml_io import load_yaml

if TYPE_CHECKING:  # the comparison needs pandas; loading a suite that names a spread file does not
    import pandas as pd

CELL_KEYS = ("protocol", "dataset", "split", "variant", "metric")
# the roles of a spread file's runs; the tolerance counts the runs of the recorded command only
# (`--pretrain` retrains with the recorded seed): another seed is kept as a data point
SHIPPED, RETRAINED, OTHER_SEED = "shipped", "retrained", "other_seed"
ROLES = (SHIPPED, RETRAINED, OTHER_SEED)
COUNTED_ROLES = (SHIPPED, RETRAINED)
INSIDE, OUTSIDE = "inside", "OUTSIDE"
NO_SPREAD = "no measured spread"  # a (protocol, metric) the spread file has no tolerance for


@dataclass
class RetrainCheckSpec:
    """A suite's ``retrain_check:`` block."""
    spread: str  # the spread file: a path, or relative to configs/
    sha256: str  # of the spread file: any other content is an error
    suffix: str = "_retrained"  # <name><suffix> is the retraining of <name>


@dataclass
class SpreadRun:
    """One checkpoint of the measurement: the shipped file or one retraining of its recipe."""
    name: str  # model name in the measurement's records
    recipe: str  # the zoo checkpoint whose recorded command it is (the shipped run: itself)
    role: str  # ROLES: the shipped file, the recorded command retrained, or it with another seed
    command: str  # the training command as run, environment first
    kernel: str  # torch.backends.cpu.get_cpu_capability() during the training
    train_seed: int
    cpu: str
    threads: int
    torch: str
    wall_s: float  # of the training
    checkpoint_sha256: str
    code_commit: str  # the clean checkout that trained it (a retraining) and evaluated it


@dataclass
class SpreadCell:
    """One column of the protocols for one recipe: the mean over seeds of each of its runs (name -> value)."""
    recipe: str
    protocol: str
    dataset: str
    split: str
    variant: str
    metric: str
    fingerprint: str
    values: dict[str, float]


@dataclass
class CitedDifference:
    """A shipped-vs-retrained difference observed elsewhere (not re-measured here), with its source."""
    source: str
    protocol: str
    dataset: str
    variant: str
    metric: str
    shipped: float
    retrained: float
    note: str


@dataclass
class SpreadTolerance:
    protocol: str
    metric: str
    largest_measured: float  # the largest |difference| between two runs of a recipe, over the protocol's cells
    largest_between: str  # which cell and runs gave it
    largest_cited: float  # the largest cited |difference| (0 when none is cited)
    floor: float  # the evaluation's own cross-machine room (the shipped table's tolerance)
    tolerance: float  # derive_tolerance(...)


@dataclass
class RetrainSpread:
    """The spread file (configs/zoo/synthscenes_retrain_spread.yaml)."""
    measured_on: list[str]  # the zoo checkpoints whose recipes were retrained
    applies_to: str  # in words: which models the tolerances are used for
    rule: str  # in words: how a tolerance follows from the measurements
    round_up_to: float  # the rule's rounding step
    floor_source: str  # where each tolerance's floor comes from
    date: str
    cpu: str
    native_kernel: str
    torch: str
    evaluated_with: str  # kernel and threads of every evaluation
    eval_command: str
    made_by: str
    runs: list[SpreadRun]
    cells: list[SpreadCell]
    cited: list[CitedDifference]
    tolerances: list[SpreadTolerance]

    def tolerance_of(self, protocol: str, metric: str) -> SpreadTolerance | None:
        return next((t for t in self.tolerances if (t.protocol, t.metric) == (protocol, metric)), None)


# ----------------------------------------------------------------------------- the rule
def round_up(value: float, step: float) -> float:
    """``value`` rounded up to a multiple of ``step`` (a value already on the grid stays)."""
    return round(math.ceil(value / step - 1e-9) * step, 10)


def derive_tolerance(measured: list[float], cited: list[float], floor: float, step: float) -> float:
    """The rule: the largest |difference|, measured or cited, rounded up to ``step``; never
    below ``floor`` (a retraining is also evaluated on another machine)."""
    return max(round_up(max([0.0, *measured, *cited]), step), floor)


def pairwise_differences(cell: SpreadCell, counted: set[str] | None = None) -> list[tuple[float, str, str]]:
    """(|a - b|, a, b) for every pair of runs the cell measured (of ``counted`` runs only, when given):
    runs of one recipe, as a cell holds."""
    names = sorted(n for n in cell.values if counted is None or n in counted)
    return [(abs(cell.values[a] - cell.values[b]), a, b) for a, b in itertools.combinations(names, 2)]


def cell_label(protocol: str, dataset: str, variant: str, metric: str) -> str:
    return " ".join(x for x in (protocol, dataset, variant, metric) if x)


def counted_runs(runs: list[SpreadRun]) -> set[str]:
    """The runs the tolerances count: the shipped file and the retrainings of its recorded command."""
    return {r.name for r in runs if r.role in COUNTED_ROLES}


def largest_measured(cells: list[SpreadCell], protocol: str, metric: str,
                     counted: set[str] | None = None) -> tuple[float, str]:
    """The largest pairwise |difference| over a (protocol, metric)'s cells, every recipe's
    (between ``counted`` runs, when given), and where it is."""
    best, where = 0.0, "every run equal"
    for c in cells:
        if (c.protocol, c.metric) != (protocol, metric):
            continue
        for d, a, b in pairwise_differences(c, counted):
            if d > best:
                best, where = d, f"{cell_label(c.protocol, c.dataset, c.variant, c.metric)}: {a} vs {b}"
    return best, where


def cited_differences(cited: list[CitedDifference], protocol: str, metric: str) -> list[float]:
    return [abs(c.retrained - c.shipped) for c in cited if (c.protocol, c.metric) == (protocol, metric)]


# ----------------------------------------------------------------------------- the file
def _check_consistent(spread: RetrainSpread, where: str) -> None:
    """Every recipe measured has its shipped run and a retraining, every run a cell names is a run
    of the cell's recipe, every measured (protocol, metric) has one tolerance, and every tolerance
    follows from the cells by the rule."""
    problems = []
    recipes = list(dict.fromkeys(r.recipe for r in spread.runs))
    if sorted(recipes) != sorted(spread.measured_on) or len(set(spread.measured_on)) != len(spread.measured_on):
        problems.append(f"measured_on {spread.measured_on}: the runs are of the recipes {recipes}")
    for recipe in recipes:
        runs = [r for r in spread.runs if r.recipe == recipe]
        shipped = [r.name for r in runs if r.role == SHIPPED]
        if shipped != [recipe] or not any(r.role == RETRAINED for r in runs):
            problems.append(f"runs of {recipe}: one {SHIPPED!r} run named {recipe} and at least one {RETRAINED!r} "
                            f"run are needed")
    names_of = {recipe: {r.name for r in spread.runs if r.recipe == recipe} for recipe in recipes}
    for r in spread.runs:
        if r.role not in ROLES:
            problems.append(f"run {r.name}: role {r.role!r} (one of {', '.join(ROLES)})")
        if len(r.checkpoint_sha256) != 64:
            problems.append(f"run {r.name}: checkpoint_sha256 {r.checkpoint_sha256!r} (64 hex digits)")
        if len(r.code_commit) != 40:
            problems.append(f"run {r.name}: code_commit {r.code_commit!r} (a git commit, 40 hex digits)")
    for c in spread.cells:
        names = names_of.get(c.recipe, set())
        unknown = sorted(set(c.values) - names)
        if unknown or len(c.values) < 2:
            problems.append(f"cell {c.recipe} {cell_label(c.protocol, c.dataset, c.variant, c.metric)}: values of "
                            f"{sorted(c.values)} (at least two runs of {c.recipe}: {sorted(names)})")
    measured = {(c.protocol, c.metric) for c in spread.cells}
    stated = [(t.protocol, t.metric) for t in spread.tolerances]
    if len(set(stated)) != len(stated):
        problems.append("tolerances: a (protocol, metric) is stated twice")
    for key in sorted(measured - set(stated)):
        problems.append(f"tolerances: none for {key[0]} {key[1]}, which the cells measure")
    for t in spread.tolerances:
        if (t.protocol, t.metric) not in measured:
            problems.append(f"tolerance {t.protocol} {t.metric}: no cell measures it")
            continue
        big, _ = largest_measured(spread.cells, t.protocol, t.metric, counted_runs(spread.runs))
        cited = cited_differences(spread.cited, t.protocol, t.metric)
        want = derive_tolerance([big], cited, t.floor, spread.round_up_to)
        if (abs(big - t.largest_measured) > 1e-9 or abs(max([0.0, *cited]) - t.largest_cited) > 1e-9
                or abs(want - t.tolerance) > 1e-9):
            problems.append(f"tolerance {t.protocol} {t.metric}: states {t.tolerance:g} (largest measured "
                            f"{t.largest_measured:g}, cited {t.largest_cited:g}); the cells and the rule give "
                            f"{want:g} (largest measured {big:g}, cited {max([0.0, *cited]):g})")
    if problems:
        raise ConfigError(f"{where}: the spread file contradicts itself:\n  " + "\n  ".join(problems)
                          + "\nRegenerate it with `python -m scripts.retrain_spread`.")


def load_spread(spec: RetrainCheckSpec, relative_to: Path | None = None) -> RetrainSpread:
    """The spread file a suite names, after checking its sha256, its schema (every field
    required, no unknown one) and that its tolerances follow from its cells by its rule."""
    path = resolve_config_path(spec.spread, relative_to)
    actual = sha256_file(path)
    if actual != spec.sha256.lower():
        raise ConfigError(f"{path}: sha256 {actual}, the suite's retrain_check.sha256 is {spec.sha256}: the "
                          f"spread file changed since the suite pinned it; regenerate it with `python -m "
                          f"scripts.retrain_spread` and pin its new sha256 in the suite")
    try:
        raw = load_yaml(path.read_text())
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from exc
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: expected a mapping at the top level")
    spread = from_dict(RetrainSpread, raw, str(path))
    _check_consistent(spread, str(path))
    return spread


def spread_document(spread: RetrainSpread) -> dict[str, Any]:
    """The spread as the mapping the file holds (what load_spread reads back)."""
    return asdict(spread)


# ----------------------------------------------------------------------------- the check
def retrain_pairs(models: list[str], suffix: str) -> tuple[list[tuple[str, str]], list[str]]:
    """([(shipped, retrained)], retrained models without a shipped twin in ``models``)."""
    present = set(models)
    pairs, alone = [], []
    for name in models:
        if name.endswith(suffix) and len(name) > len(suffix):
            twin = name[: -len(suffix)]
            (pairs.append((twin, name)) if twin in present else alone.append(name))
    return pairs, alone


def _cells(records: list[dict]) -> set[tuple]:
    from harness.results.table import flatten_records

    flat = flatten_records(records)
    return set(map(tuple, flat[list(CELL_KEYS)].values.tolist()))


def check_retrains(spread: RetrainSpread, records: list[dict], suffix: str = "_retrained") -> pd.DataFrame:
    """One row per (pair, cell) either model measured: shipped and retrained means, delta
    (retrained - shipped), tolerance and verdict (inside, OUTSIDE, no measured spread, measured
    by one only, or not comparable). A retrained model without its shipped twin is one row."""
    import pandas as pd

    from harness.paper.verdict import DIFFERS, OK, verdict
    from harness.results.compare import compare_runs
    from harness.results.table import IncomparableResultsError
    by_model: dict[str, list[dict]] = {}
    for r in records:
        by_model.setdefault((r.get("model") or {}).get("name"), []).append(r)
    pairs, alone = retrain_pairs([m for m in by_model if m], suffix)
    rows = []
    for shipped, retrained in pairs:
        a, b = by_model[shipped], by_model[retrained]
        base = {"shipped_model": shipped, "retrained_model": retrained}
        try:
            table = compare_runs(a, b, all_metrics=True)
        except IncomparableResultsError as exc:
            rows.append({**base, "verdict": "not comparable", "note": str(exc).splitlines()[0]})
            continue
        table = table[table["variant"] != "all"]  # compare_runs' pooled rows: not a cell
        for _, c in table.iterrows():
            t = spread.tolerance_of(c["protocol"], c["metric"])
            row = {**base, **{k: c[k] for k in CELL_KEYS}, "shipped": c["mean_a"], "retrained": c["mean_b"],
                   "delta": c["delta"], "tolerance": t.tolerance if t else math.nan}
            if t is None:
                row.update(verdict=NO_SPREAD, note=f"the spread file has no tolerance for {c['protocol']} "
                                                   f"{c['metric']}: not judged")
            else:
                # rounded: a mean difference exactly on the tolerance must not fail on float noise
                v = verdict(round(c["delta"], 9), 0.0, 1, t.tolerance)
                row.update(verdict=INSIDE if v.startswith(OK) else OUTSIDE if v.startswith(DIFFERS) else v,
                           note="")
            rows.append(row)
        ca, cb = _cells(a), _cells(b)
        for cell in sorted(ca ^ cb):
            who = shipped if cell in ca else retrained
            rows.append({**base, **dict(zip(CELL_KEYS, cell)), "verdict": f"only {who}",
                         "note": "measured for one model of the pair only: not compared"})
    for name in alone:
        rows.append({"retrained_model": name, "shipped_model": "", "verdict": "no shipped twin",
                     "note": f"no model {name[: -len(suffix)]!r} in the run to compare it with"})
    columns = ["shipped_model", "retrained_model", *CELL_KEYS, "shipped", "retrained", "delta", "tolerance",
               "verdict", "note"]
    return pd.DataFrame(rows, columns=columns)


def source_line(spread: RetrainSpread, source: str) -> str:
    """Where the tolerances come from, in one line; ``source``: the spread file as the suite names it."""
    kernels = ", ".join(sorted({r.kernel for r in spread.runs if r.role == RETRAINED}))
    return (f"tolerance = the largest retrain-to-retrain spread of the recipes {', '.join(spread.measured_on)} (each "
            f"recorded command retrained with the CPU kernels {kernels} beside its shipped file, {spread.date}; "
            f"{source}), applied to {spread.applies_to}")


def format_retrain_check(spread: RetrainSpread, rows: pd.DataFrame, source: str) -> str:
    """The comparison table, the line saying where the tolerance comes from, and the counts."""
    import pandas as pd

    head = ["shipped", "retrained", "protocol", "data", "variant", "metric", "shipped", "retrained", "delta",
            "tolerance", "verdict"]
    number = lambda x, f: "-" if pd.isna(x) else format(x, f)  # noqa: E731
    text = lambda x: x if isinstance(x, str) and x else "-"  # noqa: E731
    body = []
    for _, r in rows.iterrows():
        data = f"{r['dataset']}/{r['split']}" if isinstance(r["dataset"], str) and r["dataset"] else "-"
        body.append([text(r["shipped_model"]), r["retrained_model"], text(r["protocol"]), data, text(r["variant"]),
                     text(r["metric"]), number(r["shipped"], ".2f"), number(r["retrained"], ".2f"),
                     number(r["delta"], "+.2f"), number(r["tolerance"], ".2f"), r["verdict"]])
    counts = rows["verdict"].value_counts()
    out = ["Retrained vs shipped: |retrained - shipped| <= tolerance per (protocol, metric)",
           source_line(spread, source)]
    out.append(text_table(head, body, right={6, 7, 8, 9}) if body else "(no retrained model in the run)")
    out.append("cells: " + (", ".join(f"{n} {v}" for v, n in counts.items()) or "none"))
    outside = rows[rows["verdict"] == OUTSIDE]
    if len(outside):
        out.append(f"{len(outside)} cell(s) outside the measured spread (reported, not a failure of the run: the "
                   f"spread comes from a few trainings of a few recipes)")
    notes = rows[rows["note"].fillna("") != ""].drop_duplicates("note")
    out += [f"  - {r['retrained_model']}: {r['verdict']}: {r['note']}" for _, r in notes.iterrows()]
    return "\n".join(out)


__all__ = ["RetrainCheckSpec", "SpreadRun", "SpreadCell", "CitedDifference", "SpreadTolerance", "RetrainSpread",
           "INSIDE", "OUTSIDE", "NO_SPREAD", "SHIPPED", "RETRAINED", "OTHER_SEED", "ROLES", "COUNTED_ROLES",
           "counted_runs", "round_up", "derive_tolerance", "pairwise_differences",
           "largest_measured", "cited_differences", "load_spread", "spread_document", "retrain_pairs",
           "check_retrains", "source_line", "format_retrain_check"]
