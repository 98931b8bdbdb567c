"""Write the retrain-to-retrain spread file from retrainings of zoo recipes and their records.

    python -m scripts.retrain_spread --runs RUNS.yaml --records RESULTS/runs [--records MORE/runs] \\
        --out configs/zoo/synthscenes_retrain_spread.yaml

RUNS.yaml says what was trained and how it was evaluated (every key required)::

    table: synthscenes               # the paper table whose tolerances are the floors
    date: '2026-12-04'
    eval_command: ssl-bench --threads 2 run EVAL.yaml --no-progress
    evaluated_with: native kernel (AVX512), 2 threads, for every checkpoint
    made_by: the scripts that ran it
    cited: []                        # CitedDifference mappings (harness.results.retrain_check)
    recipes:
      - measured_on: synth_dino      # the zoo checkpoint whose recorded command was rerun
        code: RUNS/src               # the clean checkout that trained and evaluated (its commit is kept)
        retrains:
          - name: synth_dino_retrained_avx2     # the model name of its records
            folder: RUNS/synth_dino_avx2        # the `--out` of the training
            env: {ATEN_CPU_CAPABILITY: avx2}    # environment set on the recorded command
            extra: []                           # arguments appended to it
            kernel: AVX2
            train_seed: 0
            threads: 2                          # what the training ran with (read from the checkpoint when it says)
            role: retrained                     # or other_seed (kept, not counted by the rule)

The records folders hold the evaluations of every shipped checkpoint (model name = the zoo name)
and of every retraining, under the same protocol settings. For every recipe and cell (protocol,
dataset, split, variant, metric) the file keeps each run's mean over seeds (as `ssl-bench compare`
takes it); per (protocol, metric) the largest difference between two runs of one recipe over every
recipe, the largest cited one, the table's tolerance as the floor, and the tolerance the rule
derives from them (harness.results.retrain_check.derive_tolerance). It prints the file's sha256,
which the suite's ``retrain_check.sha256`` pins.
"""
from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
from pathlib import Path

import yaml

from harness.errors import ConfigError
from harness.io_utils import atomic_write_text, sha256_file
from harness.models.zoo import zoo_entry
from harness.paper.spec import load_table
from harness.results.compare import compare_runs
from harness.results.records import iter_records
from harness.results.retrain_check import (OTHER_SEED, RETRAINED, SHIPPED, CitedDifference, RetrainCheckSpec,
                                           RetrainSpread, SpreadCell, SpreadRun, SpreadTolerance, cited_differences,
                                           counted_runs, derive_tolerance, largest_measured, load_spread,
                                           spread_document)
from scripts.synthscenes_zoo import cpu_model

ROUND_UP_TO = 0.1
RULE = ("per (protocol, metric): the largest |difference| between two runs of one recipe's recorded command (its "
        "shipped file and every run with role retrained), over the protocol's cells and every recipe measured, or a "
        "cited one if larger, rounded up to 0.1 point; never below the floor. Runs with role other_seed are kept as a "
        "data point and not counted: --pretrain retrains with the recorded seed")
APPLIES_TO = ("every <name>_retrained model of the suite: the largest spread of the recipes measured, for a recipe "
              "not measured too")
FLOOR_SOURCE = ("the SynthScenes table's tolerance for the protocol (configs/paper/synthscenes.yaml), for the metric "
                "the table judges (0 for other metrics): the room an evaluation of one file needs across CPU kernels, "
                "which a retraining on another machine also needs")
HEADER = """\
# The retrain-to-retrain spread of SynthScenes zoo recipes: each shipped checkpoint and retrainings
# of its recorded command (other CPU kernels, another seed), evaluated on the retrain suite's
# protocols. Its tolerances judge every `<name>_retrained` model of `python run_benchmark.py
# --pretrain` against `<name>` (configs/suites/synthscenes_retrain.yaml pins this file's sha256;
# harness/results/retrain_check.py reads it). Written by `python -m scripts.retrain_spread`; do not
# edit by hand: the loader checks that every tolerance follows from the cells by the rule.
"""


def _records_of(folder: Path) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for r in iter_records(folder):
        out.setdefault((r.get("model") or {}).get("name"), []).append(r)
    return out


def _training_time_and_threads(folder: Path, spec: dict) -> tuple[float, int]:
    """(wall seconds, threads) of a training: a pretraining's checkpoint records the stretches it
    ran in (one: it was not resumed) and its log the time; the supervised reference records its
    seconds, and RUNS.yaml its threads."""
    meta = json.loads((folder / "backbone.json").read_text())
    if "trained_on" not in meta:
        return round(float(meta["train_seconds"]), 1), int(spec["threads"])
    trained_on = meta["trained_on"]
    if len(trained_on) != 1:
        raise ConfigError(f"{folder}: trained in {len(trained_on)} stretches (resumed); the spread needs "
                          f"uninterrupted trainings")
    rows = [json.loads(line) for line in (folder / "log.jsonl").read_text().splitlines() if line.strip()]
    return round(float(rows[-1]["elapsed_s"]), 1), int(trained_on[0]["threads"])


def _retrain_run(spec: dict, recipe: str, recorded: str, commit: str) -> SpreadRun:
    folder = Path(spec["folder"])
    wall_s, threads = _training_time_and_threads(folder, spec)
    env = " ".join(f"{k}={v}" for k, v in spec["env"].items())
    import torch

    if spec["role"] not in (RETRAINED, OTHER_SEED):
        raise ConfigError(f"retrain {spec['name']}: role {spec['role']!r} ({RETRAINED} or {OTHER_SEED})")
    return SpreadRun(name=spec["name"], recipe=recipe, role=spec["role"],
                     command=" ".join(x for x in (env, recorded, shlex.join(spec["extra"])) if x),
                     kernel=spec["kernel"], train_seed=int(spec["train_seed"]), cpu=cpu_model(),
                     threads=threads, torch=str(torch.__version__), wall_s=wall_s,
                     checkpoint_sha256=sha256_file(folder / "backbone.safetensors"), code_commit=commit)


def _shipped_run(name: str, commit: str) -> SpreadRun:
    entry = zoo_entry(name)
    prov = entry.provenance or {}
    return SpreadRun(name=name, recipe=name, role=SHIPPED, command=prov["command"],
                     kernel="not recorded (its CPU model's native kernel)", train_seed=0, cpu=prov["cpu"],
                     threads=int(prov["threads"]), torch=prov["torch"], wall_s=float(prov["wall_s"]),
                     checkpoint_sha256=entry.sha256, code_commit=commit)


def measured_cells(by_model: dict[str, list[dict]], shipped: str, retrained: list[str]) -> list[SpreadCell]:
    """Per cell both the shipped file and a retraining of its recipe measured: every run's mean over seeds."""
    cells: dict[tuple, SpreadCell] = {}
    for name in retrained:
        if not by_model.get(name):
            raise ConfigError(f"no records of {name!r}; models there: {sorted(k for k in by_model if k)}")
        table = compare_runs(by_model[shipped], by_model[name], all_metrics=True)
        for _, c in table[table["variant"] != "all"].iterrows():
            key = (c["protocol"], c["dataset"], c["split"], c["variant"], c["metric"], c["fingerprint"])
            cell = cells.setdefault(key, SpreadCell(shipped, *key, values={shipped: float(c["mean_a"])}))
            cell.values[name] = float(c["mean_b"])
    return [cells[k] for k in sorted(cells)]


def _clean_commit(code: Path) -> str:
    git = lambda *a: subprocess.run(["git", *a], cwd=code, capture_output=True, text=True).stdout.strip()  # noqa: E731
    commit = git("rev-parse", "HEAD")
    if len(commit) != 40 or git("status", "--porcelain", "--untracked-files=no"):
        raise ConfigError(f"{code}: not a clean git checkout (commit {commit!r}); the spread needs the code that ran")
    return commit


def build_spread(runs_spec: dict, records: list[Path]) -> RetrainSpread:
    by_model: dict[str, list[dict]] = {}
    for folder in records:
        for name, recs in _records_of(folder).items():
            by_model.setdefault(name, []).extend(recs)
    runs: list[SpreadRun] = []
    cells: list[SpreadCell] = []
    for recipe in runs_spec["recipes"]:
        shipped = recipe["measured_on"]
        if not by_model.get(shipped):
            raise ConfigError(f"{', '.join(map(str, records))}: no records of the shipped {shipped!r}")
        commit = _clean_commit(Path(recipe["code"]))
        recorded = zoo_entry(shipped).provenance["command"]
        retrains = [_retrain_run(r, shipped, recorded, commit) for r in recipe["retrains"]]
        runs += [_shipped_run(shipped, commit), *retrains]
        cells += measured_cells(by_model, shipped, [r.name for r in retrains])
    cited = [CitedDifference(**c) for c in runs_spec["cited"]]
    table = load_table(runs_spec["table"])
    judged = set(map(tuple, table.rows[["protocol", "metric"]].values.tolist()))
    tolerances = []
    counted = counted_runs(runs)
    for protocol, metric in sorted({(c.protocol, c.metric) for c in cells}):
        big, where = largest_measured(cells, protocol, metric, counted)
        cite = cited_differences(cited, protocol, metric)
        ps = table.spec.protocols.get(protocol)
        floor = float(ps.tolerance) if ps is not None and (protocol, metric) in judged else 0.0
        tolerances.append(SpreadTolerance(protocol, metric, round(big, 10), where, max([0.0, *cite]), floor,
                                          derive_tolerance([big], cite, floor, ROUND_UP_TO)))
    import torch

    return RetrainSpread(
        measured_on=[r["measured_on"] for r in runs_spec["recipes"]], applies_to=APPLIES_TO,
        rule=RULE, round_up_to=ROUND_UP_TO, floor_source=FLOOR_SOURCE, date=str(runs_spec["date"]),
        cpu=cpu_model(), native_kernel=str(torch.backends.cpu.get_cpu_capability()), torch=str(torch.__version__),
        evaluated_with=runs_spec["evaluated_with"], eval_command=runs_spec["eval_command"],
        made_by=runs_spec["made_by"], runs=runs, cells=cells, cited=cited, tolerances=tolerances)


def write_spread(spread: RetrainSpread, out: Path) -> str:
    """Write the file and read it back through the loader; its sha256."""
    text = HEADER + yaml.safe_dump(spread_document(spread), sort_keys=False, width=110, allow_unicode=True)
    atomic_write_text(out, text)
    digest = sha256_file(out)
    load_spread(RetrainCheckSpec(spread=str(out.resolve()), sha256=digest))
    return digest


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", required=True, help="what was trained and how it was evaluated (YAML, see above)")
    p.add_argument("--records", required=True, action="append",
                   help="records folder of the evaluations (again for each further folder)")
    p.add_argument("--out", required=True, help="the spread file to write")
    args = p.parse_args(argv)
    try:
        runs_spec = yaml.safe_load(Path(args.runs).read_text())
        spread = build_spread(runs_spec, [Path(r) for r in args.records])
        digest = write_spread(spread, Path(args.out))
    except (ConfigError, KeyError, FileNotFoundError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"written: {args.out}\nsha256: {digest} (pin it as retrain_check.sha256 in the suite)")
    for t in spread.tolerances:
        print(f"  {t.protocol} {t.metric}: tolerance {t.tolerance:g} (largest measured {t.largest_measured:.3f}: "
              f"{t.largest_between}; cited {t.largest_cited:g}; floor {t.floor:g})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
