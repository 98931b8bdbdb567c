"""Paper tables as data: the published numbers (results/paper/*.csv) and the table specs
(configs/paper/<table>.yaml, or ``paper/<table>.yaml`` in the protocol folder whose protocols
the table measures alone) that say how to reproduce them from zoo checkpoints.

A spec names, per protocol, its preset and settings, the tolerance of the verdict rule with
its reason (harness.paper.verdict), and the variant its records must carry; per dataset, its
reader and size. A table protocol may give settings by the model's patch size (``by_patch``)
and CSV variants that are settings of the run (``variants``, e.g. a memory size): each is a
run of its own. ``load_table`` checks all of it against the CSV before any work.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

from harness.config import CONFIG_ROOT, from_dict
from harness.errors import ConfigError
from harness.paths import shipped
from harness.variants import fraction_value, parse_variant
from harness.yaml_io import load_yaml

PAPER_DIR = shipped("results/paper")
TABLES_DIR = CONFIG_ROOT / "paper"
CSV_COLUMNS = ["paper", "table", "row", "method", "arch", "pretrain_data", "epochs", "protocol", "dataset",
               "variant", "metric", "value", "zoo_name"]


@dataclass
class Passes:
    # forward passes over the training / validation split: a number, or the name of a run setting
    # whose value is the count ("epochs": a training that sees the split once an epoch and validates
    # after each); every run of the table must then give that setting (values or variants)
    train: float | str = 1.0
    val: float | str = 1.0


def pass_count(count: float | str, values: dict) -> float | None:
    """A Passes count for a run with settings ``values``: the number, or the named setting's value
    (None where the run does not give it)."""
    if isinstance(count, str):
        value = values.get(count)
        return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None
    return float(count)


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
    # no-best-group rule of measure_cell still holds for every other key)
    variants: dict = field(default_factory=dict)  # {"key=value[,key=value]": {setting: value}}
    # The verdict rule (harness.paper.verdict.verdict): a cell passes iff |measured - paper| <= tolerance,
    # in the metric's points; the seed spread never widens it. Both are required in a table
    # YAML, the reason in words (printed beside every comparison).
    tolerance: float | None = None
    tolerance_reason: str = ""
    # metric -> its own tolerance, in that metric's unit, where one protocol reports metrics of
    # different units (an RMSE in metres beside percentages); the reason covers them too
    metric_tolerances: dict = field(default_factory=dict)
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


FOLDER_TABLES = "paper"  # a protocol folder's own paper tables: <folder>/paper/<table>.yaml


def table_files() -> dict[str, Path]:
    """Table name -> its spec: configs/paper/*.yaml and every protocol folder's paper/*.yaml. A
    name found twice is an error (a table is named by its file, in suites and on the command line)."""
    from harness.registry import protocol_folders  # torch-free: the folders only

    found: dict[str, Path] = {}
    for folder in [TABLES_DIR, *(f / FOLDER_TABLES for f in protocol_folders())]:
        for path in sorted(folder.glob("*.yaml")):
            if path.stem in found:
                raise ConfigError(f"paper table {path.stem!r} is specified twice: {found[path.stem]} and {path}; "
                                  f"rename one of them")
            found[path.stem] = path
    return found


def list_tables() -> list[str]:
    """The names of the shipped paper tables (configs/paper/*.yaml, <protocol folder>/paper/*.yaml)."""
    return sorted(table_files())


def spec_path(table: str | Path) -> Path:
    """The YAML of a table: a name from ``list_tables()`` or the path of a table YAML."""
    p = Path(table)
    if p.suffix in (".yaml", ".yml") and p.is_file():
        return p
    files = table_files()
    if str(table) in files:
        return files[str(table)]
    known = sorted(files)
    if not known:
        raise ConfigError(f"no paper table in {TABLES_DIR}: the configs that ship with ssl-bench are "
                          f"missing; reinstall it (or give the path of a table YAML)")
    raise ConfigError(f"unknown paper table {str(table)!r}; known: {', '.join(known)} "
                      f"(or give the path of a table YAML)")


def read_paper_csv(path: str | Path) -> pd.DataFrame:
    """A results/paper CSV with its schema checked; ``variant``/``zoo_name`` empty -> ''."""
    path = Path(path)
    try:
        df = pd.read_csv(path, dtype={"variant": str, "zoo_name": str, "epochs": str, "row": str},
                         keep_default_na=False, na_values={"value": [""]})
    except (pd.errors.ParserError, UnicodeDecodeError, ValueError) as exc:
        # e.g. a field with a comma left unquoted: one line, not pandas' traceback
        raise ConfigError(f"{path}: not a readable paper CSV ({str(exc).strip().splitlines()[-1]}); quote "
                          f"fields that hold commas") from exc
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
    """A table spec and its published numbers, checked against each other (tolerances with
    their reasons, settings variants, every CSV protocol and dataset described)."""
    path = spec_path(table)
    try:
        raw = load_yaml(path.read_text()) or {}
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
    if not csv.is_file():
        raise ConfigError(f"{path}: its published numbers {spec.csv} are neither beside it nor in {PAPER_DIR}; "
                          f"write them there (the columns of results/paper/*.csv)")
    rows = read_paper_csv(csv)
    for name, ps in spec.protocols.items():
        if ps.tolerance is None or ps.tolerance < 0 or not ps.tolerance_reason.strip():
            raise ConfigError(
                f"{path}: protocols.{name}: tolerance {ps.tolerance!r}, tolerance_reason "
                f"{ps.tolerance_reason!r}; every protocol of a paper table states the |measured - paper| it "
                f"accepts (a number >= 0, in the metric's points) and why (tolerance_reason: a sentence)")
    for name, ps in spec.protocols.items():
        metrics = set(rows.loc[rows["protocol"] == name, "metric"])
        for metric, tol in (ps.metric_tolerances or {}).items():
            if metric not in metrics or not isinstance(tol, (int, float)) or isinstance(tol, bool) or tol < 0:
                raise ConfigError(
                    f"{path}: protocols.{name}.metric_tolerances: {metric}: {tol!r}; each key is a metric of "
                    f"the CSV's {name} cells ({', '.join(sorted(metrics))}) and each value a number >= 0")
    for name, ps in spec.protocols.items():
        _check_named_passes(path, name, ps)
    for name, ps in spec.protocols.items():
        if not ps.variants:
            continue
        settings = {k for key in ps.variants for k in parse_variant(key)}
        if settings & set(ps.variant or {}):
            raise ConfigError(
                f"{path}: protocols.{name}: {sorted(settings & set(ps.variant))} are run settings (variants) and "
                f"also in `variant` (what the records carry); a key is one or the other")
        for v in sorted(set(rows.loc[rows["protocol"] == name, "variant"])):
            hits = matching_settings(v, ps)
            if len(hits) != 1:
                raise ConfigError(
                    f"{path}: protocols.{name}: the CSV variant {v!r} matches {len(hits)} of variants "
                    f"{sorted(ps.variants)} ({hits}); every cell of a protocol with `variants` is "
                    f"the run of exactly one")
    unknown_p = sorted(set(rows["protocol"]) - set(spec.protocols))
    unknown_d = sorted(set(rows["dataset"]) - set(spec.datasets))
    if unknown_p or unknown_d:
        raise ConfigError(f"{path}: the CSV {csv.name} uses protocol(s) {unknown_p} / dataset(s) {unknown_d} "
                          f"that the table spec does not describe")
    return Table(path.stem, spec, path, rows)


def _check_named_passes(path: Path, name: str, ps: ProtocolSpec) -> None:
    """A pass count that names a setting must be given by every run (the table's values, or each variant)."""
    named = sorted({c for c in (ps.passes.train, ps.passes.val) if isinstance(c, str)})
    runs = [dict(ps.values, **v) for v in ps.variants.values()] if ps.variants else [dict(ps.values)]
    for setting in named:
        if any(pass_count(setting, values) is None for values in runs):
            raise ConfigError(
                f"{path}: protocols.{name}.passes counts {setting!r}, but not every run gives it a number: "
                f"set {setting} in protocols.{name}.values (or in each of its variants)")


def same_variant_value(want: Any, got: Any) -> bool:
    """Variant values from a CSV/YAML (strings, numbers) against a record's: equal as text
    (case aside), or as numbers ("1/8" == 0.125, "8e-4" == 0.0008); booleans only as text."""
    if str(want).lower() == str(got).lower():
        return True
    if isinstance(want, bool) or isinstance(got, bool):
        return False
    a, b = fraction_value(want), fraction_value(got)
    return a is not None and b is not None and abs(a - b) <= 1e-12 * max(1.0, abs(a))


def matching_settings(variant: str, ps: ProtocolSpec) -> list[str]:
    """The ProtocolSpec.variants keys whose key=value pairs the CSV variant ``variant`` contains."""
    have = parse_variant(variant)
    return [key for key in ps.variants
            if all(a in have and same_variant_value(b, have[a]) for a, b in parse_variant(key).items())]


def settings_of(variant: str, ps) -> str:
    """The ProtocolSpec.variants key (a run's settings) a CSV variant belongs to; "" without any."""
    return (matching_settings(variant, ps) or [""])[0] if ps.variants else ""


def settings_groups(grp: pd.DataFrame, ps) -> list[tuple[str, pd.DataFrame]]:
    """Cells of one (checkpoint, protocol, dataset) split by the ProtocolSpec.variants they
    belong to (a cell belongs to the variant whose key=value pairs its own variant contains;
    load_table makes sure each cell belongs to exactly one): one run each."""
    keys = grp["variant"].map(lambda v: settings_of(v, ps))
    return [(k, grp[keys == k]) for k in dict.fromkeys(keys)]


def variant_matches(want: dict[str, Any], measured: dict[str, Any]) -> bool:
    """Every key of ``want`` matches: None = ``measured`` must not carry the key."""
    for k, v in want.items():
        if v is None:
            if k in measured:
                return False
        elif k not in measured or not same_variant_value(v, measured[k]):
            return False
    return True


def tolerance_for(ps, metric: str) -> float | None:
    """A protocol's tolerance for one metric: its own (metric_tolerances) or the shared one; any
    object with ``tolerance`` (and optionally ``metric_tolerances``) will do."""
    return (getattr(ps, "metric_tolerances", None) or {}).get(metric, ps.tolerance)


__all__ = ["PAPER_DIR", "TABLES_DIR", "FOLDER_TABLES", "table_files", "CSV_COLUMNS", "Passes", "pass_count",
           "ProtocolSpec", "DatasetSpec", "TableSpec", "Table", "list_tables", "spec_path", "read_paper_csv",
           "paper_numbers", "load_table", "same_variant_value", "matching_settings", "settings_of", "settings_groups",
           "variant_matches", "tolerance_for"]
