"""The runs a paper table needs, and what they cost: ``plan`` makes one Job per (zoo
checkpoint, protocol, dataset, settings variant) with the checkpoint, dataset and protocol
checked; ``format_plan`` prints it (``ssl-bench reproduce --dry-run``) with an estimate of the
backbone FLOPs (harness.models.flops) and, from configs/gpus.yaml (harness.paper.gpus), the GPU-hours they
take on a chosen GPU model and precision, and the wall-clock hours on N such GPUs.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from harness.data.subsets import KNOWN
from harness.models.backbone import ARCHS
from harness.errors import SslBenchError
from harness.models.flops import arch_flops
from harness.paper.gpus import GpuChoice
from harness.paper.spec import DatasetSpec, ProtocolSpec, Table, load_table, pass_count, settings_groups
from harness.paper.verdict import tolerance_lines
from harness.paths import default_zoo_dir
from harness.text_table import text_table
from harness.models.zoo import ZooLookup, find_checkpoint

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
    """The estimated backbone work of one run (None where the model or the sizes are unknown)."""
    train_hw: tuple[int, int] | None
    val_hw: tuple[int, int] | None
    gflops_per_image: float | None
    images: float | None  # forward passes of images, all included
    flops: float | None
    # flops split by workload kind (harness.paper.gpus.WORKLOADS): "train" where the backbone's
    # backward runs too (flop_factor > 1), "forward" for everything else
    flops_by_workload: dict[str, float] | None = None


def _subset_size(train_subset: str | None) -> int | None:
    """Training images of a known named subset (harness.data.subsets), e.g. SimCLRv2's 1% list."""
    known = KNOWN.get(train_subset) if isinstance(train_subset, str) else None
    return known.images if known is not None else None


def estimate_cost(ps: ProtocolSpec, ds: DatasetSpec, dataset_key: str, arch_kwargs: dict | None,
                  values: dict | None = None) -> Cost:
    """The backbone FLOPs of one run: training and validation images at their input sizes,
    times the protocol's passes, sweep and flop factor. ``values``: the run's settings
    (default the protocol's)."""
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
    n_train = _subset_size(values.get("train_subset")) or ds.n_train
    train_passes, val_passes = pass_count(ps.passes.train, values), pass_count(ps.passes.val, values)
    if train_images is None and n_train is not None and train_passes is not None:
        train_images = train_passes * n_train
    val_images = val_passes * ds.n_val if ds.n_val is not None and val_passes is not None else None
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
    """One run of a table: a zoo checkpoint on one protocol, dataset and settings variant, what
    was found for it, its cost, and (once run) its records."""
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


def _check_protocol(name: str) -> str:
    try:
        from harness.registry import PROTOCOLS

        PROTOCOLS.get(name)
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
        for variant, cells in settings_groups(grp, ps):
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
    """The plan as text: one line per run (checkpoint, data, input size, FLOPs and, with
    ``gpu``, GPU-hours), the totals, the verdict rule's tolerances and what is not ready."""
    spec, rows = tab.spec, tab.rows
    out = [f"Reproduce {spec.title}  [{tab.source}]",
           f"paper numbers: {len(rows)} cells in {rows['row'].nunique()} rows; "
           f"{int((rows['zoo_name'] != '').sum())} cells have a zoo checkpoint",
           f"data root: {data_root if data_root is not None else '(not given: datasets not checked)'}   "
           f"zoo dir: {zoo_dir if zoo_dir is not None else default_zoo_dir()}", ""]
    out.append(_jobs_table(spec, jobs, gpu))
    out.append("")
    out += _total_lines(spec, jobs, gpu)
    notes = [f"  {p}: {s.note}" for p, s in spec.protocols.items() if s.note]
    if notes:
        out += ["cost model:"] + notes
    out += ["verdicts (a measured std never widens the tolerance; std > tolerance is inconclusive):"]
    out += tolerance_lines(tab)
    out += _not_ready_lines(jobs)
    out += _no_checkpoint_lines(rows)
    return "\n".join(out)


def _jobs_table(spec, jobs: list[Job], gpu: GpuChoice | None) -> str:
    header = ["#", "checkpoint", "arch", "found", "protocol", "dataset", "data", "cells", "input",
              "GFLOP/img", "images", "est. FLOPs"]
    if gpu is not None:
        header += ["GPU-hours", f"wall h on {gpu.n_gpus}"]
    header.append("status")
    body = [_job_row(i, j, spec, gpu) for i, j in enumerate(jobs, 1)]
    right = {0, 7, 9, 10, 11} | ({12, 13} if gpu is not None else set())
    return text_table(header, body, right=right) if body else "(nothing to run)"


def _job_row(i: int, j: Job, spec, gpu: GpuChoice | None) -> list[str]:
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
    return row + [j.status]


def _total_lines(spec, jobs: list[Job], gpu: GpuChoice | None) -> list[str]:
    """Total FLOPs and, with ``gpu``, total GPU-hours and the GPU's description."""
    total = 0.0
    total_hours, unknown_hours = 0.0, 0
    for j in jobs:
        total_hours += j.gpu_hours or 0.0
        unknown_hours += j.gpu_hours is None
        total += j.cost.flops or 0.0
    out = [f"total estimated backbone FLOPs: {_fmt_flops(total)} over {len(jobs)} runs "
           f"(forward = 2 x multiply-adds; {', '.join(sorted({p for p in spec.protocols}))})"]
    if gpu is not None:
        missing = f" ({unknown_hours} run(s) without an estimate not included)" if unknown_hours else ""
        out.append(f"total estimated GPU-hours: {_fmt_hours(total_hours)} ({gpu.gpu.key}, {gpu.precision}); "
                   f"wall-clock {_fmt_hours(gpu.wall_hours(total_hours))} h on {gpu.n_gpus} GPU(s) "
                   f"assuming perfect scaling{missing}")
        out += gpu.describe()
    return out


def _not_ready_lines(jobs: list[Job]) -> list[str]:
    """Each distinct (status, message) of the jobs that are not ready, once."""
    issues = [j for j in jobs if j.status != "ready"]
    if not issues:
        return []
    out = ["", "not ready:"]
    seen = set()
    for j in issues:
        key = (j.status, j.message)
        if key in seen:
            continue
        seen.add(key)
        out.append(f"  - {j.zoo_name} {j.protocol}/{j.dataset}: {j.status}: {j.message}")
    return out


def _no_checkpoint_lines(rows) -> list[str]:
    """The paper's rows with cells no zoo checkpoint can reproduce."""
    no_ckpt = rows[rows["zoo_name"] == ""]
    if not len(no_ckpt):
        return []
    labels = sorted({(int(r['row']) if str(r['row']).isdigit() else 0, _row_label(r))
                     for _, r in no_ckpt.iterrows()})
    return ["", f"not reproducible here (no public checkpoint in the zoo): {len(no_ckpt)} cells of rows",
            "  " + "; ".join(f"{n}: {lab}" for n, lab in labels)]


__all__ = ["Cost", "estimate_cost", "Job", "job_values", "plan", "format_plan"]
