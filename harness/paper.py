"""Paper tables: the published numbers (results/paper/*.csv) and the suites that
reproduce them from zoo checkpoints (configs/paper/<table>.yaml).

``reproduce(table, data_root, zoo_dir)`` runs, for every (zoo checkpoint, protocol,
dataset) the table needs, the registered protocol through ``harness.evaluate`` (so the
result records land in results/runs and feed the leaderboards), then prints measured /
paper / delta side by side with the seed spread and a verdict per cell. A cell whose
checkpoint, dataset or protocol is missing says so; it never fails the whole table.
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
from harness.gpus import DEFAULT_GPU, DEFAULT_PRECISION, GpuChoice
from harness.leaderboard import fraction_value, parse_variant
from harness.paths import REPO_ROOT, checkpoint_cache_dir
from harness.zoo import ZooLookup, find_checkpoint, zoo_model

PAPER_DIR = REPO_ROOT / "results" / "paper"
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
    # its keys are not looked for in the records' variants
    variants: dict = field(default_factory=dict)  # {"key=value[,key=value]": {setting: value}}
    tolerance: float = 1.0  # |measured - paper| accepted when the seed spread does not cover it
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
    raise ConfigError(f"unknown paper table {str(table)!r}; known: {', '.join(list_tables())} "
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
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=CSV_COLUMNS)


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
    unknown_p = sorted(set(rows["protocol"]) - set(spec.protocols))
    unknown_d = sorted(set(rows["dataset"]) - set(spec.datasets))
    if unknown_p or unknown_d:
        raise ConfigError(f"{path}: the CSV {csv.name} uses protocol(s) {unknown_p} / dataset(s) {unknown_d} "
                          f"that the table spec does not describe")
    return Table(path.stem, spec, path, rows)


# ----------------------------------------------------------------------------- cost
def vit_flops(arch_kwargs: dict, h: int, w: int) -> float:
    """Forward FLOPs (2 x multiply-adds) of a ViT on one h x w image: patch embedding,
    per block qkv + projection + MLP (linear in tokens) and attention (quadratic)."""
    p, d, depth = arch_kwargs["patch_size"], arch_kwargs["embed_dim"], arch_kwargs["depth"]
    mlp = arch_kwargs.get("mlp_ratio", 4.0)
    n_patch = (h // p) * (w // p)
    n = n_patch + 1 + arch_kwargs.get("reg_tokens", 0)
    macs = n_patch * 3 * p * p * d
    macs += depth * (n * d * d * (4 + 2 * mlp) + 2 * n * n * d)
    return 2.0 * macs


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
    f_train, f_val = vit_flops(arch_kwargs, *thw), vit_flops(arch_kwargs, *vhw)
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

    if ds.reader not in DATASETS:
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


def _variant_groups(grp: pd.DataFrame, ps: ProtocolSpec) -> list[tuple[str, pd.DataFrame]]:
    """Cells of one (checkpoint, protocol, dataset) split by the ProtocolSpec.variants they
    belong to (a cell belongs to the variant whose key=value pairs its own variant contains)."""
    if not ps.variants:
        return [("", grp)]
    specs = {k: parse_variant(k) for k in ps.variants}

    def which(variant: str) -> str:
        have = parse_variant(variant)
        return next((k for k, want in specs.items() if all(str(have.get(a)) == str(b) for a, b in want.items())), "")
    keys = grp["variant"].map(which)
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


def default_zoo_dir() -> Path:
    return checkpoint_cache_dir() / "zoo"


# ----------------------------------------------------------------------------- formatting
def _fmt_flops(f: float | None) -> str:
    if f is None or (isinstance(f, float) and math.isnan(f)):
        return "n/a"
    for unit, scale in (("EFLOP", 1e18), ("PFLOP", 1e15), ("TFLOP", 1e12), ("GFLOP", 1e9)):
        if f >= scale:
            return f"{f / scale:.2f} {unit}"
    return f"{f:.3g} FLOP"


def _text_table(header: list[str], rows: list[list[str]], right: set[int] = frozenset()) -> str:
    widths = [max(len(x) for x in [h] + [r[j] for r in rows]) for j, h in enumerate(header)]
    fmt = lambda r: "  ".join(v.rjust(w) if j in right else v.ljust(w)  # noqa: E731
                              for j, (v, w) in enumerate(zip(r, widths))).rstrip()
    return "\n".join([fmt(header), "  ".join("-" * w for w in widths)] + [fmt(r) for r in rows])


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
    out.append(_text_table(header, body, right=right) if body else "(nothing to run)")
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
def _variant_matches(cell: dict[str, str], measured: dict[str, Any]) -> bool:
    for k, v in cell.items():
        if k not in measured:
            return False
        m = measured[k]
        if k == "fraction":
            a, b = fraction_value(v), fraction_value(m)
            if a is None or b is None or abs(a - b) > 1e-12:
                return False
        elif str(m) != str(v):
            return False
    return True


def _measure(cell: pd.Series, records: list[dict], settings: str = "") -> dict[str, Any]:
    """Mean/std/n over seeds of the records that fit the cell; with several other variant
    values (e.g. per-lr results) the best group is taken, as the papers report the best.
    ``settings``: the run's ProtocolSpec.variants key, whose keys the records do not carry."""
    drop = set(parse_variant(settings)) if settings else set()
    want = {k: v for k, v in parse_variant(cell["variant"]).items() if k not in drop}
    metric = cell["metric"].lower()
    groups: dict[str, list[float]] = {}
    for rec in records:
        if not _variant_matches(want, rec.get("variant") or {}):
            continue
        value = next((v for k, v in (rec.get("metrics") or {}).items() if k.lower() == metric), None)
        if not isinstance(value, (int, float)):
            continue
        rest = {k: v for k, v in (rec.get("variant") or {}).items() if k not in want}
        groups.setdefault(repr(sorted(rest.items())), []).append(float(value))
    if not groups:
        return {}
    stats = []
    for key, vals in groups.items():
        s = pd.Series(vals)
        stats.append((s.mean(), float(s.std(ddof=1)) if len(s) > 1 else 0.0, len(s), key))
    mean, std, n, key = max(stats)
    return {"measured": mean, "std": std, "n": n,
            "note": f"best of {len(stats)} variants ({key})" if len(stats) > 1 else ""}


def verdict(delta: float, std: float, n: int, tolerance: float) -> str:
    spread = 2 * std if n > 1 else 0.0
    if n > 1 and abs(delta) <= spread:
        return "ok (within 2 std)"
    if abs(delta) <= tolerance:
        return f"ok (within ±{tolerance:g})"
    return f"DIFFERS (|delta| > {'2 std, ' if n > 1 else ''}±{tolerance:g})"


def compare_cells(tab: Table, jobs: list[Job]) -> pd.DataFrame:
    rows = tab.rows.copy()
    for col in ("measured", "std", "delta"):
        rows[col] = float("nan")
    rows["n"] = 0
    rows["verdict"] = "no public checkpoint"
    rows["note"] = ""
    for job in jobs:
        tol = tab.spec.protocols[job.protocol].tolerance
        for idx in job.cells:
            if job.status != "done":
                rows.at[idx, "verdict"] = job.status
                rows.at[idx, "note"] = job.message
                continue
            m = _measure(rows.loc[idx], job.records, job.variant)
            if not m:
                rows.at[idx, "verdict"] = "not measured"
                rows.at[idx, "note"] = (f"the {job.protocol} run produced no {rows.at[idx, 'metric']} for "
                                        f"{rows.at[idx, 'variant'] or 'this cell'}")
                continue
            delta = m["measured"] - rows.at[idx, "value"]
            rows.at[idx, "measured"], rows.at[idx, "std"], rows.at[idx, "n"] = m["measured"], m["std"], m["n"]
            rows.at[idx, "delta"] = delta
            rows.at[idx, "verdict"] = verdict(delta, m["std"], m["n"], tol)
            rows.at[idx, "note"] = m["note"] + (" (stored records)" if job.skipped else "")
    return rows


def format_comparison(cells: pd.DataFrame, title: str = "", show_unreproducible: bool = False) -> str:
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
    out.append(_text_table(header, body, right={7, 8, 9}) if body else "(no reproducible cells)")
    counts = cells["verdict"].map(lambda v: v.split(" (")[0]).value_counts()
    out.append("")
    out.append("cells: " + ", ".join(f"{v} {k}" for k, v in counts.items()))
    notes = shown[(shown["note"] != "") & (shown["n"] == 0)].drop_duplicates("note")
    if len(notes):
        out.append("why cells were not measured:")
        out += [f"  - {r['zoo_name']} {r['protocol']}/{r['dataset']}: {r['note']}" for _, r in notes.iterrows()]
    return "\n".join(out)


# ----------------------------------------------------------------------------- reproduce
@dataclass
class ReproduceResult:
    table: Table
    jobs: list[Job]
    cells: pd.DataFrame | None  # None for a dry run
    text: str
    csv: Path | None = None


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
                if problem:
                    raise ConfigError(problem)
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
    text = format_comparison(cells, f"{tab.spec.title}: measured vs paper")
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
    r = subparsers.add_parser("reproduce", help="reproduce a paper table from zoo checkpoints")
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
    if res.cells is None:
        return 0
    return 1 if any(j.status == "failed" for j in res.jobs) else 0


def cmd_paper(args) -> int:
    if args.table is None:
        print("tables: " + ", ".join(list_tables()))
        df = paper_numbers()
    else:
        df = paper_numbers(args.table)
    with pd.option_context("display.max_rows", None, "display.width", 200):
        print(df.to_string(index=False))
    return 0


__all__ = ["list_tables", "load_table", "read_paper_csv", "paper_numbers", "vit_flops", "estimate_cost", "plan",
           "format_plan", "compare_cells", "format_comparison", "verdict", "reproduce", "ReproduceResult",
           "add_cli", "cmd_reproduce", "cmd_paper", "default_zoo_dir"]
