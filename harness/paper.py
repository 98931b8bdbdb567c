"""Paper tables: the published numbers (results/paper/*.csv) and the suites that
reproduce them from zoo checkpoints (configs/paper/<table>.yaml).

``reproduce(table, data_root, zoo_dir)`` runs, for every (zoo checkpoint, protocol,
dataset) the table needs, the registered protocol through ``harness.evaluate`` (so the
result records land in results/runs and feed the leaderboards), then prints measured /
paper / delta side by side with the seed spread and a verdict per cell. The verdict rule is
strict: a cell's measurement uses only the records whose variant is the table's protocol
exactly (``cell_variant``; several unpinned groups are "ambiguous", never the best of
them), and it passes iff |delta| <= the tolerance the table YAML states with its reason (a
std above the tolerance makes it "inconclusive", never a pass). A cell whose checkpoint,
dataset or protocol is missing says so; it never stops the rest of the table.
``exit_status``: 1 when any cell failed or nothing was measured.
A table protocol may give settings by the model's patch size (``by_patch``) and CSV
variants that are settings of the run (``variants``, e.g. a memory size): each is a run of
its own, and its keys are dropped from what the records must match (``cell_variant``); the
rest of the rule is unchanged.
``dry_run=True`` prints the plan: checkpoints, protocols, datasets, an estimate of the
backbone FLOPs and, from configs/gpus.yaml (harness.gpus), the GPU-hours they take on a chosen
GPU model and precision, and the wall-clock hours on N such GPUs.
"""
from __future__ import annotations

import math
import sys
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import pandas as pd
import yaml

from harness.backbone import ARCHS
from harness.config import CONFIG_ROOT, from_dict
from harness.device import DEVICE_HELP
from harness.errors import CheckpointError, ConfigError, SslBenchError
from harness.flops import arch_flops
from harness.gpus import DEFAULT_GPU, DEFAULT_PRECISION, GpuChoice
from harness.leaderboard import fraction_value, parse_variant
from harness.paths import default_zoo_dir, shipped
from harness.text_table import text_table
from harness.zoo import ZooLookup, find_checkpoint, zoo_model

PAPER_DIR = shipped("results/paper")
TABLES_DIR = CONFIG_ROOT / "paper"
CSV_COLUMNS = ["paper", "table", "row", "method", "arch", "pretrain_data", "epochs", "protocol", "dataset",
               "variant", "metric", "value", "zoo_name"]

# ----------------------------------------------------------------------------- specs
@dataclass
class Passes:
    train: float = 1.0  # forward passes over the training split
    val: float = 1.0


@dataclass
class ProtocolSpec:
    preset: str | None = None
    values: dict = field(default_factory=dict)  # protocol settings on top of the preset
    # settings that depend on the model's patch size, on top of `values`: e.g. open-hummingbird-
    # eval's README runs DINO (patch 16) at 512 and DINOv2 (patch 14) at 504
    by_patch: dict = field(default_factory=dict)  # {patch size: {setting: value}}
    # CSV variants that are protocol settings rather than something a record reports, e.g.
    # "memory_size=102400": {memory_size: 102400}; each such variant is a run of its own, and
    # its keys are not looked for in the records' variants (cell_variant drops them; the
    # no-best-group rule of _measure still holds for every other key)
    variants: dict = field(default_factory=dict)  # {"key=value[,key=value]": {setting: value}}
    # The verdict rule (harness.paper.verdict): a cell passes iff |measured - paper| <= tolerance,
    # in the metric's points; the seed spread never widens it. Both are required in a table
    # YAML, the reason in words (printed beside every comparison).
    tolerance: float | None = None
    tolerance_reason: str = ""
    # The paper's protocol as the variant its result records carry: key -> value for the keys
    # a cell's own variant does not give (a cell's value wins); null = records must not carry
    # the key. A record counts for a cell only if it matches all of these and the cell's keys.
    variant: dict = field(default_factory=dict)
    input: Any = "native"  # FLOPs estimate: "native" (dataset's typical size), [h, w], an int, or
    #                        "input_size" (the protocol's square input_size setting)
    val_input: Any = None  # default: same as input
    passes: Passes = field(default_factory=Passes)
    train_crops: dict = field(default_factory=dict)  # dataset -> crops seen in training (iters x batch)
    sweep: int = 1  # independent runs (e.g. an lr sweep of separate trainings)
    flop_factor: float = 1.0  # 3 = forward + backward (finetuning)
    note: str = ""


@dataclass
class DatasetSpec:
    reader: str  # registered dataset name, passed as the protocol's `dataset`
    root: str = "."  # relative to data_root
    train_split: str = "train"
    val_split: str = "val"
    n_train: int | None = None
    n_val: int | None = None
    native_hw: list[int] | None = None  # typical image size (FLOPs estimate only)


@dataclass
class TableSpec:
    title: str
    csv: str
    protocols: dict[str, ProtocolSpec]
    datasets: dict[str, DatasetSpec]
    description: str = ""


@dataclass
class Table:
    name: str
    spec: TableSpec
    source: Path
    rows: pd.DataFrame  # the paper numbers


def list_tables() -> list[str]:
    return sorted(p.stem for p in TABLES_DIR.glob("*.yaml"))


def _spec_path(table: str | Path) -> Path:
    p = Path(table)
    if p.suffix in (".yaml", ".yml") and p.is_file():
        return p
    cand = TABLES_DIR / f"{table}.yaml"
    if cand.is_file():
        return cand
    known = list_tables()
    if not known:
        raise ConfigError(f"no paper table in {TABLES_DIR}: the configs that ship with ssl-bench are "
                          f"missing; reinstall it (or give the path of a table YAML)")
    raise ConfigError(f"unknown paper table {str(table)!r}; known: {', '.join(known)} "
                      f"(or give the path of a table YAML)")


def read_paper_csv(path: str | Path) -> pd.DataFrame:
    """A results/paper CSV with its schema checked; ``variant``/``zoo_name`` empty -> ''."""
    path = Path(path)
    df = pd.read_csv(path, dtype={"variant": str, "zoo_name": str, "epochs": str, "row": str},
                     keep_default_na=False, na_values={"value": [""]})
    missing = [c for c in CSV_COLUMNS if c not in df.columns]
    if missing:
        raise ConfigError(f"{path}: missing column(s) {missing}; a paper CSV has {CSV_COLUMNS}")
    if df["value"].isna().any():
        bad = df.index[df["value"].isna()].tolist()[:5]
        raise ConfigError(f"{path}: rows {bad} have no value (leave cells the paper does not report out)")
    df["value"] = df["value"].astype(float)
    return df[CSV_COLUMNS]


def paper_numbers(table: str | None = None) -> pd.DataFrame:
    """All published numbers (or one table's), with their source columns."""
    if table is not None:
        return load_table(table).rows
    frames = [read_paper_csv(p) for p in sorted(PAPER_DIR.glob("*.csv"))]
    if not frames:
        raise ConfigError(f"no published numbers (*.csv) in {PAPER_DIR}: the files that ship with "
                          f"ssl-bench are missing; reinstall it")
    return pd.concat(frames, ignore_index=True)


def load_table(table: str | Path) -> Table:
    path = _spec_path(table)
    try:
        raw = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from exc
    spec = from_dict(TableSpec, raw, str(path))
    spec.protocols = {k: from_dict(ProtocolSpec, v, str(path), f"protocols.{k}")
                      for k, v in (spec.protocols or {}).items()}
    spec.datasets = {k: from_dict(DatasetSpec, v, str(path), f"datasets.{k}")
                     for k, v in (spec.datasets or {}).items()}
    csv = Path(spec.csv)
    if not csv.is_absolute():
        csv = (path.parent / csv) if (path.parent / csv).is_file() else PAPER_DIR / csv
    rows = read_paper_csv(csv)
    for name, ps in spec.protocols.items():
        if ps.tolerance is None or ps.tolerance < 0 or not ps.tolerance_reason.strip():
            raise ConfigError(
                f"{path}: protocols.{name}: tolerance {ps.tolerance!r}, tolerance_reason "
                f"{ps.tolerance_reason!r}; every protocol of a paper table states the |measured - paper| it "
                f"accepts (a number >= 0, in the metric's points) and why (tolerance_reason: a sentence)")
    for name, ps in spec.protocols.items():
        if not ps.variants:
            continue
        settings = {k for key in ps.variants for k in parse_variant(key)}
        if settings & set(ps.variant or {}):
            raise ConfigError(
                f"{path}: protocols.{name}: {sorted(settings & set(ps.variant))} are run settings (variants) and "
                f"also in `variant` (what the records carry); a key is one or the other")
        for v in sorted(set(rows.loc[rows["protocol"] == name, "variant"])):
            hits = _settings_of(v, ps)
            if len(hits) != 1:
                raise ConfigError(
                    f"{path}: protocols.{name}: the CSV variant {v!r} matches {len(hits)} of variants "
                    f"{sorted(ps.variants)} ({hits}); every cell of a protocol with `variants` is the run of exactly one")
    unknown_p = sorted(set(rows["protocol"]) - set(spec.protocols))
    unknown_d = sorted(set(rows["dataset"]) - set(spec.datasets))
    if unknown_p or unknown_d:
        raise ConfigError(f"{path}: the CSV {csv.name} uses protocol(s) {unknown_p} / dataset(s) {unknown_d} "
                          f"that the table spec does not describe")
    return Table(path.stem, spec, path, rows)


# ----------------------------------------------------------------------------- cost
def _input_hw(inp: Any, ds: DatasetSpec, patch: int, values: dict | None = None) -> tuple[int, int] | None:
    if inp == "input_size":
        size = (values or {}).get("input_size")
        return (int(size), int(size)) if size else None
    if inp in (None, "native"):
        if not ds.native_hw:
            return None
        h, w = ds.native_hw
        # "down-sampled to the closest resolution that is a multiple of the patch size"
        return max(patch, round(h / patch) * patch), max(patch, round(w / patch) * patch)
    if isinstance(inp, int):
        return inp, inp
    h, w = inp
    return int(h), int(w)


@dataclass
class Cost:
    train_hw: tuple[int, int] | None
    val_hw: tuple[int, int] | None
    gflops_per_image: float | None
    images: float | None  # forward passes of images, all included
    flops: float | None
    # flops split by workload kind (harness.gpus.WORKLOADS): "train" where the backbone's
    # backward runs too (flop_factor > 1), "forward" for everything else
    flops_by_workload: dict[str, float] | None = None


def estimate_cost(ps: ProtocolSpec, ds: DatasetSpec, dataset_key: str, arch_kwargs: dict | None,
                  values: dict | None = None) -> Cost:
    if arch_kwargs is None:
        return Cost(None, None, None, None, None)
    patch = arch_kwargs["patch_size"]
    values = ps.values if values is None else values
    thw = _input_hw(ps.input, ds, patch, values)
    vhw = _input_hw(ps.val_input if ps.val_input is not None else ps.input, ds, patch, values)
    if thw is None or vhw is None:
        return Cost(thw, vhw, None, None, None)
    f_train, f_val = arch_flops(arch_kwargs, *thw), arch_flops(arch_kwargs, *vhw)
    train_images = ps.train_crops.get(dataset_key)
    if train_images is None and ds.n_train is not None:
        train_images = ps.passes.train * ds.n_train
    val_images = ps.passes.val * ds.n_val if ds.n_val is not None else None
    if train_images is None or val_images is None:
        return Cost(thw, vhw, f_train / 1e9, None, None)
    train_flops = ps.sweep * ps.flop_factor * f_train * train_images
    val_flops = ps.sweep * f_val * val_images
    by_workload = {"forward": val_flops, "train": 0.0}
    by_workload["train" if ps.flop_factor > 1 else "forward"] += train_flops
    flops = ps.sweep * (ps.flop_factor * f_train * train_images + f_val * val_images)
    return Cost(thw, vhw, f_train / 1e9, ps.sweep * (train_images + val_images), flops, by_workload)


# ----------------------------------------------------------------------------- plan
@dataclass
class Job:
    zoo_name: str
    protocol: str
    dataset: str  # the table's dataset key
    cells: list[int]  # row indices into Table.rows
    lookup: ZooLookup
    arch: str | None
    arch_kwargs: dict | None
    data_path: Path | None
    data_status: str  # "found" | "missing: ..." | "not checked"
    protocol_status: str  # "ok" | "unavailable: ..."
    cost: Cost
    status: str = "ready"  # ready | missing checkpoint | needs trust | missing dataset | ...
    message: str = ""
    variant: str = ""  # the ProtocolSpec.variants key this run measures ("" = none)
    values: dict = field(default_factory=dict)  # protocol settings on top of the preset, resolved
    records: list[dict] = field(default_factory=list)
    skipped: bool = False  # records came from an earlier run
    gpu_hours: float | None = None  # on the GpuChoice the plan was estimated for


def _protocol_class(name: str):
    from harness.registry import PROTOCOLS

    return PROTOCOLS.get(name)


def _check_protocol(name: str) -> str:
    try:
        _protocol_class(name)
        return "ok"
    except SslBenchError as exc:
        return f"unavailable: {str(exc).splitlines()[0]}"


def _data_roots(data_root: str | Path | dict | None, table: Table) -> dict[str, Path | None]:
    """dataset key -> folder handed to the protocol (data_root may map keys to folders)."""
    out = {}
    for key, ds in table.spec.datasets.items():
        if isinstance(data_root, dict):
            out[key] = Path(data_root[key]) if key in data_root else None
        elif data_root is None:
            out[key] = None
        else:
            out[key] = (Path(data_root) / ds.root) if ds.root not in ("", ".") else Path(data_root)
    return out


def _check_dataset(ds: DatasetSpec, path: Path | None) -> str:
    if path is None:
        return "not checked (no data root)"
    from harness.registry import DATASETS

    if ds.reader not in DATASETS or not getattr(DATASETS.get(ds.reader), "harness_reader", True):
        # e.g. Pascal Context / COCO-Stuff: read by mmseg inside the protocol, which reports
        # a missing dataset itself when it runs.
        return "not checked (read by the protocol)"
    reader = DATASETS.get(ds.reader)
    try:
        reader(path, ds.val_split)
        return "found"
    except (SslBenchError, OSError, ValueError) as exc:
        return f"missing: {str(exc).splitlines()[0]}"


def _arch_of(lookup: ZooLookup) -> tuple[str | None, dict | None]:
    if lookup.entry is not None:
        return lookup.entry.arch, ARCHS[lookup.entry.arch]
    if lookup.status == "harness" and lookup.path is not None:
        try:
            meta = yaml.safe_load(lookup.path.with_suffix(".json").read_text())
            return meta.get("arch"), meta.get("arch_kwargs")
        except (OSError, yaml.YAMLError):
            pass
    return None, None


def _settings_of(variant: str, ps: ProtocolSpec) -> list[str]:
    """The ProtocolSpec.variants keys whose key=value pairs the CSV variant ``variant`` contains."""
    have = parse_variant(variant)
    return [key for key in ps.variants
            if all(a in have and _same_value(b, have[a]) for a, b in parse_variant(key).items())]


def _variant_groups(grp: pd.DataFrame, ps: ProtocolSpec) -> list[tuple[str, pd.DataFrame]]:
    """Cells of one (checkpoint, protocol, dataset) split by the ProtocolSpec.variants they
    belong to (a cell belongs to the variant whose key=value pairs its own variant contains;
    load_table makes sure each cell belongs to exactly one)."""
    if not ps.variants:
        return [("", grp)]
    keys = grp["variant"].map(lambda v: (_settings_of(v, ps) or [""])[0])
    return [(k, grp[keys == k]) for k in dict.fromkeys(keys)]


def job_values(ps: ProtocolSpec, variant: str, arch_kwargs: dict | None) -> tuple[dict, str | None]:
    """The protocol settings of one run: the table's values, then those of the model's patch
    size, then those of the variant. Returns (values, problem or None)."""
    values = dict(ps.values)
    if ps.by_patch:
        patch = (arch_kwargs or {}).get("patch_size")
        by = {int(k): v for k, v in ps.by_patch.items()}
        if patch is None:
            return values, None  # unknown model: the run reports it
        if patch not in by:
            return values, f"the table gives no settings for patch size {patch} (only {sorted(by)})"
        values.update(by[patch])
    if variant:
        values.update(ps.variants[variant])
    return values, None


def plan(table: str | Path | Table, data_root: str | Path | dict | None = None,
         zoo_dir: str | Path | None = None, *, trust: bool = False, models: list[str] | None = None,
         datasets: list[str] | None = None, zoo_path: str | Path | None = None) -> tuple[Table, list[Job]]:
    """The runs a table needs: one Job per (zoo checkpoint, protocol, dataset)."""
    tab = table if isinstance(table, Table) else load_table(table)
    zoo_dir = Path(zoo_dir) if zoo_dir is not None else default_zoo_dir()
    rows = tab.rows
    roots = _data_roots(data_root, tab)
    data_status = {k: _check_dataset(ds, roots[k]) for k, ds in tab.spec.datasets.items()
                   if datasets is None or k in datasets}
    proto_status = {p: _check_protocol(p) for p in tab.spec.protocols}
    jobs = []
    keyed = rows[rows["zoo_name"] != ""]
    for (zoo_name, protocol, dataset), grp in keyed.groupby(["zoo_name", "protocol", "dataset"], sort=False):
        if models is not None and zoo_name not in models:
            continue
        if datasets is not None and dataset not in datasets:
            continue
        lookup = find_checkpoint(zoo_name, zoo_dir, zoo_path)
        arch, akw = _arch_of(lookup)
        ds = tab.spec.datasets[dataset]
        ps = tab.spec.protocols[protocol]
        for variant, cells in _variant_groups(grp, ps):
            values, problem = job_values(ps, variant, akw)
            job = Job(zoo_name, protocol, dataset, list(cells.index), lookup, arch, akw, roots[dataset],
                      data_status[dataset], proto_status[protocol], estimate_cost(ps, ds, dataset, akw, values),
                      variant=variant, values=values)
            if lookup.status in ("missing", "unknown"):
                job.status, job.message = "missing checkpoint", lookup.message
            elif lookup.status == "official" and lookup.entry is not None and lookup.entry.needs_trust and not trust:
                job.status = "needs --trust-checkpoint"
                job.message = (f"{lookup.path} is a full training checkpoint (Python objects inside): check its "
                               f"origin ({lookup.entry.url}), then pass --trust-checkpoint")
            elif job.protocol_status != "ok":
                job.status, job.message = "protocol unavailable", job.protocol_status[len("unavailable: "):]
            elif problem:
                job.status, job.message = "protocol unavailable", problem
            elif job.data_status.startswith("missing"):
                job.status, job.message = "missing dataset", f"{dataset}: {job.data_status[len('missing: '):]}"
            elif roots[dataset] is None:
                job.status, job.message = "no data root", "give --data-root"
            jobs.append(job)
    return tab, jobs


# ----------------------------------------------------------------------------- formatting
def _fmt_flops(f: float | None) -> str:
    if f is None or (isinstance(f, float) and math.isnan(f)):
        return "n/a"
    for unit, scale in (("EFLOP", 1e18), ("PFLOP", 1e15), ("TFLOP", 1e12), ("GFLOP", 1e9)):
        if f >= scale:
            return f"{f / scale:.2f} {unit}"
    return f"{f:.3g} FLOP"


def _row_label(r) -> str:
    return f"{r['method']} {r['arch']} {r['pretrain_data']} {r['epochs']}".strip()


def _fmt_hours(h: float | None) -> str:
    if h is None:
        return "n/a"
    if h < 0.01:
        return "<0.01"
    return f"{h:.2f}" if h < 10 else f"{h:.1f}" if h < 1000 else f"{h:,.0f}"


def format_plan(tab: Table, jobs: list[Job], data_root=None, zoo_dir=None, gpu: GpuChoice | None = None) -> str:
    spec, rows = tab.spec, tab.rows
    out = [f"Reproduce {spec.title}  [{tab.source}]",
           f"paper numbers: {len(rows)} cells in {rows['row'].nunique()} rows; "
           f"{int((rows['zoo_name'] != '').sum())} cells have a zoo checkpoint",
           f"data root: {data_root if data_root is not None else '(not given: datasets not checked)'}   "
           f"zoo dir: {zoo_dir if zoo_dir is not None else default_zoo_dir()}", ""]
    header = ["#", "checkpoint", "arch", "found", "protocol", "dataset", "data", "cells", "input",
              "GFLOP/img", "images", "est. FLOPs"]
    if gpu is not None:
        header += ["GPU-hours", f"wall h on {gpu.n_gpus}"]
    header.append("status")
    body = []
    total = 0.0
    total_hours, unknown_hours = 0.0, 0
    for i, j in enumerate(jobs, 1):
        ps = spec.protocols[j.protocol]
        proto = f"{j.protocol}[{ps.preset}]" if ps.preset else j.protocol
        if j.variant:
            proto += f" {j.variant}"
        hw = j.cost.train_hw
        inp = f"{hw[0]}x{hw[1]}" if hw else "?"
        if j.cost.val_hw and j.cost.val_hw != hw:
            inp += f" / {j.cost.val_hw[0]}x{j.cost.val_hw[1]}"
        data = "found" if j.data_status == "found" else ("?" if j.data_status.startswith("not") else "MISSING")
        found = {"harness": "imported", "official": "official file", "missing": "MISSING",
                 "unknown": "MISSING"}[j.lookup.status]
        row = [str(i), j.zoo_name, j.arch or "?", found, proto, j.dataset, data, str(len(j.cells)), inp,
               f"{j.cost.gflops_per_image:.3g}" if j.cost.gflops_per_image else "n/a",
               f"{j.cost.images:,.0f}" if j.cost.images else "n/a", _fmt_flops(j.cost.flops)]
        if gpu is not None:
            row += [_fmt_hours(j.gpu_hours), _fmt_hours(gpu.wall_hours(j.gpu_hours))]
            total_hours += j.gpu_hours or 0.0
            unknown_hours += j.gpu_hours is None
        body.append(row + [j.status])
        total += j.cost.flops or 0.0
    right = {0, 7, 9, 10, 11} | ({12, 13} if gpu is not None else set())
    out.append(text_table(header, body, right=right) if body else "(nothing to run)")
    out.append("")
    out.append(f"total estimated backbone FLOPs: {_fmt_flops(total)} over {len(jobs)} runs "
               f"(forward = 2 x multiply-adds; {', '.join(sorted({p for p in spec.protocols}))})")
    if gpu is not None:
        missing = f" ({unknown_hours} run(s) without an estimate not included)" if unknown_hours else ""
        out.append(f"total estimated GPU-hours: {_fmt_hours(total_hours)} ({gpu.gpu.key}, {gpu.precision}); "
                   f"wall-clock {_fmt_hours(gpu.wall_hours(total_hours))} h on {gpu.n_gpus} GPU(s) "
                   f"assuming perfect scaling{missing}")
        out += gpu.describe()
    notes = [f"  {p}: {s.note}" for p, s in spec.protocols.items() if s.note]
    if notes:
        out += ["cost model:"] + notes
    out += ["verdicts (a measured std never widens the tolerance; std > tolerance is inconclusive):"]
    out += tolerance_lines(tab)
    issues = [j for j in jobs if j.status != "ready"]
    if issues:
        out += ["", "not ready:"]
        seen = set()
        for j in issues:
            key = (j.status, j.message)
            if key in seen:
                continue
            seen.add(key)
            out.append(f"  - {j.zoo_name} {j.protocol}/{j.dataset}: {j.status}: {j.message}")
    no_ckpt = rows[rows["zoo_name"] == ""]
    if len(no_ckpt):
        labels = sorted({(int(r['row']) if str(r['row']).isdigit() else 0, _row_label(r))
                         for _, r in no_ckpt.iterrows()})
        out += ["", f"not reproducible here (no public checkpoint in the zoo): {len(no_ckpt)} cells of rows",
                "  " + "; ".join(f"{n}: {lab}" for n, lab in labels)]
    return "\n".join(out)


# ----------------------------------------------------------------------------- matching
# Verdicts a measured cell can get, and what a cell's `outcome` is: "pass" only for OK;
# "fail" for a cell whose run finished (or broke) without a pass; "not run" for a cell
# nothing was run for (no checkpoint, dataset or protocol), which fails nothing by itself.
OK, DIFFERS, INCONCLUSIVE, AMBIGUOUS, NOT_MEASURED = "ok", "DIFFERS", "inconclusive", "ambiguous", "not measured"
FAILED_RUN = ("failed", "checkpoint error")


def _same_value(want: Any, got: Any) -> bool:
    """Variant values from a CSV/YAML (strings, numbers) against a record's: equal as text
    (case aside), or as numbers ("1/8" == 0.125, "8e-4" == 0.0008); booleans only as text."""
    if str(want).lower() == str(got).lower():
        return True
    if isinstance(want, bool) or isinstance(got, bool):
        return False
    a, b = fraction_value(want), fraction_value(got)
    return a is not None and b is not None and abs(a - b) <= 1e-12 * max(1.0, abs(a))


def _variant_matches(want: dict[str, Any], measured: dict[str, Any]) -> bool:
    """Every key of ``want`` matches: None = ``measured`` must not carry the key."""
    for k, v in want.items():
        if v is None:
            if k in measured:
                return False
        elif k not in measured or not _same_value(v, measured[k]):
            return False
    return True


def _label(variant: dict[str, Any]) -> str:
    return ",".join(f"{k}={'(absent)' if v is None else v}" for k, v in sorted(variant.items())) or "(no variant)"


def cell_variant(cell: pd.Series, protocol: ProtocolSpec, settings: str = "") -> dict[str, Any]:
    """The variant a record must carry to count for ``cell``: the table's protocol variant
    (its defaults) with the cell's own keys on top. ``settings``: the run's
    ProtocolSpec.variants key (e.g. "memory_size=102400"); its keys are settings of the run,
    not something its records report, so they are dropped from what the records must match."""
    want = {**(protocol.variant or {}), **parse_variant(cell["variant"])}
    drop = set(parse_variant(settings)) if settings else set()
    return {k: v for k, v in want.items() if k not in drop}


def _measure(cell: pd.Series, records: list[dict], protocol: ProtocolSpec, settings: str = "") -> dict[str, Any]:
    """Mean/std/n over seeds of the records whose variant is exactly the cell's protocol
    (``cell_variant``; ``settings`` = the run's ProtocolSpec.variants key, whose keys the
    records do not carry). Records that also vary in keys neither the cell nor the table pins
    (e.g. one result per lr when the cell does not say which) are grouped by those keys: one
    group is measured; several are an ambiguity, never resolved by taking the best of them.
    Returns {"status": "measured" | AMBIGUOUS | NOT_MEASURED, "note": ..., measured/std/n}."""
    want = cell_variant(cell, protocol, settings)
    metric = cell["metric"].lower()
    groups: dict[str, list[float]] = {}
    others: set[str] = set()
    for rec in records:
        var = rec.get("variant") or {}
        if not _variant_matches(want, var):
            others.add(_label(var))
            continue
        value = next((v for k, v in (rec.get("metrics") or {}).items() if k.lower() == metric), None)
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            continue
        groups.setdefault(_label({k: v for k, v in var.items() if k not in want}), []).append(float(value))
    if not groups:
        seen = f"; the run's records have {'; '.join(sorted(others))}" if others else ""
        return {"status": NOT_MEASURED, "note": f"no {cell['metric']} record with variant {_label(want)}{seen}"}
    if len(groups) > 1:
        parts = [f"{key} (n={len(vals)})" for key, vals in sorted(groups.items())]
        return {"status": AMBIGUOUS,
                "note": f"{len(groups)} variant groups match and neither the cell nor the table's protocol "
                        f"variant says which is the paper's: {'; '.join(parts)}; pin the key in the table "
                        f"YAML (protocols.<name>.variant)"}
    (vals,) = groups.values()
    s = pd.Series(vals)
    return {"status": "measured", "measured": float(s.mean()), "std": float(s.std(ddof=1)) if len(s) > 1 else 0.0,
            "n": len(s), "note": ""}


def verdict(delta: float, std: float, n: int, tolerance: float) -> str:
    """Pass iff |delta| <= tolerance. The seed spread only makes it stricter: with several
    seeds whose std exceeds the tolerance the cell is inconclusive, even with a small delta
    (a noisier run never passes more easily)."""
    if abs(delta) > tolerance:
        return f"{DIFFERS} (|delta| > {tolerance:g})"
    if n > 1 and std > tolerance:
        return f"{INCONCLUSIVE} (std {std:.2f} > {tolerance:g})"
    return f"{OK} (|delta| <= {tolerance:g})"


def compare_cells(tab: Table, jobs: list[Job]) -> pd.DataFrame:
    """Per cell: measured / std / n / delta / tolerance, a verdict and an outcome (pass, fail,
    not run; see the constants above)."""
    rows = tab.rows.copy()
    for col in ("measured", "std", "delta", "tolerance"):
        rows[col] = float("nan")
    rows["n"] = 0
    rows["verdict"] = "no public checkpoint"
    rows["outcome"] = "not run"
    rows["note"] = ""
    for job in jobs:
        ps = tab.spec.protocols[job.protocol]
        for idx in job.cells:
            rows.at[idx, "tolerance"] = ps.tolerance
            if job.status != "done":
                rows.at[idx, "verdict"] = job.status
                rows.at[idx, "note"] = job.message
                rows.at[idx, "outcome"] = "fail" if job.status in FAILED_RUN else "not run"
                continue
            m = _measure(rows.loc[idx], job.records, ps, job.variant)
            stored = " (stored records)" if job.skipped else ""
            if m["status"] != "measured":
                rows.at[idx, "verdict"], rows.at[idx, "outcome"] = m["status"], "fail"
                rows.at[idx, "note"] = f"{job.protocol}{' ' + job.variant if job.variant else ''}: {m['note']}{stored}"
                continue
            delta = m["measured"] - rows.at[idx, "value"]
            rows.at[idx, "measured"], rows.at[idx, "std"], rows.at[idx, "n"] = m["measured"], m["std"], m["n"]
            rows.at[idx, "delta"] = delta
            v = verdict(delta, m["std"], m["n"], ps.tolerance)
            rows.at[idx, "verdict"] = v
            rows.at[idx, "outcome"] = "pass" if v.startswith(OK) else "fail"
            rows.at[idx, "note"] = stored.strip()
    return rows


def exit_status(cells: pd.DataFrame | None) -> int:
    """`ssl-bench reproduce`'s exit status: 0 for a dry run (None) or when at least one cell
    was measured and no cell failed; 1 when any cell failed (DIFFERS, inconclusive,
    ambiguous, not measured by a finished run, or its run failed) or nothing was measured.
    Cells nothing was run for (no checkpoint / dataset / protocol) fail nothing by
    themselves."""
    if cells is None:
        return 0
    if (cells["outcome"] == "fail").any() or not (cells["n"] > 0).any():
        return 1
    return 0


def tolerance_lines(tab: Table) -> list[str]:
    """One line per protocol: the verdict rule's tolerance and why."""
    metrics = tab.rows.groupby("protocol")["metric"].agg(lambda m: "/".join(sorted(set(m)))).to_dict()
    return [f"  {name}: pass iff |measured - paper| <= {ps.tolerance:g} {metrics.get(name, '')} points"
            f"{'; variant ' + _label(ps.variant) if ps.variant else ''} - {ps.tolerance_reason}"
            for name, ps in tab.spec.protocols.items()]


def format_comparison(cells: pd.DataFrame, title: str = "", show_unreproducible: bool = False,
                      tolerances: list[str] | None = None) -> str:
    shown = cells if show_unreproducible else cells[cells["verdict"] != "no public checkpoint"]
    header = ["row", "model", "zoo", "protocol", "dataset", "variant", "metric", "paper", "measured", "delta",
              "verdict"]
    body = []
    for _, r in shown.iterrows():
        if r["n"] > 0:
            meas = f"{r['measured']:.2f}" + (f" ± {r['std']:.2f} (n={int(r['n'])})" if r["n"] > 1 else "")
            delta = f"{r['delta']:+.2f}"
        else:
            meas, delta = "-", "-"
        body.append([str(r["row"]), f"{r['method']} {r['arch']} {r['pretrain_data']}", r["zoo_name"] or "-",
                     r["protocol"], r["dataset"], r["variant"] or "-", r["metric"], f"{r['value']:.1f}", meas,
                     delta, r["verdict"]])
    out = [title] if title else []
    if tolerances:
        out += ["tolerances (a measured std never widens them; std > tolerance is inconclusive):"] + tolerances
    out.append(text_table(header, body, right={7, 8, 9}) if body else "(no reproducible cells)")
    counts = cells["verdict"].map(lambda v: v.split(" (")[0]).value_counts()
    out.append("")
    out.append("cells: " + ", ".join(f"{v} {k}" for k, v in counts.items()))
    outcomes = cells["outcome"].value_counts()
    status = exit_status(cells)
    why = ("some cell failed" if (cells["outcome"] == "fail").any() else "nothing was measured") if status else \
        "every measured cell passed"
    out.append(f"outcome: {outcomes.get('pass', 0)} pass, {outcomes.get('fail', 0)} fail, "
               f"{outcomes.get('not run', 0)} not run -> exit status {status} ({why})")
    notes = shown[(shown["note"] != "") & (shown["n"] == 0)].drop_duplicates("note")
    if len(notes):
        out.append("why cells have no measurement:")
        out += [f"  - {r['zoo_name']} {r['protocol']}/{r['dataset']}"
                f"{' ' + r['variant'] if r['outcome'] == 'fail' and r['variant'] else ''}: {r['verdict']}: {r['note']}"
                for _, r in notes.iterrows()]
    return "\n".join(out)


# ----------------------------------------------------------------------------- reproduce
@dataclass
class ReproduceResult:
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
    ``harness.zoo.find_checkpoint``). ``models`` / ``datasets`` restrict the table.
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
    from harness.evaluate import evaluate

    runs = Path(runs_dir) if runs_dir is not None else None
    for job in jobs:
        if job.status != "ready":
            continue
        ps = tab.spec.protocols[job.protocol]
        ds = tab.spec.datasets[job.dataset]
        try:
            model = zoo_model(job.zoo_name, zoo_dir, trust=trust, zoo_path=zoo_path).to(device)
            if job.arch_kwargs is None:  # a harness checkpoint found only now: settings by its patch
                job.values, problem = job_values(ps, job.variant, {"patch_size": model.backbone.patch_size})
                if problem:  # as the plan says it for a model whose patch size it knows
                    job.status, job.message = "protocol unavailable", problem
                    continue
            protocol = _protocol_class(job.protocol).from_preset(
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


__all__ = ["list_tables", "load_table", "read_paper_csv", "paper_numbers", "estimate_cost", "plan",
           "format_plan", "compare_cells", "format_comparison", "verdict", "exit_status", "cell_variant",
           "tolerance_lines", "job_values", "reproduce", "ReproduceResult",
           "add_cli", "cmd_reproduce", "cmd_paper"]
