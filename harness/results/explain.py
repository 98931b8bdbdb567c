"""`ssl-bench explain A B`: why two numbers differ. Lists every setting that differs between two
result records, or between a record and a published table cell, and says for each whether it
can change the number:

- yes: a protocol setting in the fingerprint, the weights, the data, the model adapter, the
  seed or the variant (another result of the run);
- no: a setting the protocol lists in ``NOT_IN_FINGERPRINT`` (execution only: batch size,
  workers, search device, ...), a label (model name, checkpoint path, host);
- may: device, precision, world size, CPU threads and library versions (rounding and kernels).

A side is a record file, a record id (or a unique prefix of one) in the records folder, a model
name (with ``--protocol``, and ``--dataset`` where the model has several runs), or, for one
side, a paper table cell ``TABLE:ROW`` (configs/paper/TABLE.yaml, row ROW of its CSV). A paper
cell's settings are the table's: its protocol built from the table's preset and values
(``harness.protocol_info.build_protocol``, as ``ssl-bench reproduce`` runs it) and its zoo
checkpoint.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.errors import ConfigError
from harness.protocol_info import headline_metric, metric_of, setting_names
from harness.results.index import index_of
from harness.results.records import is_record, model_identity, runs_dir
from harness.text_table import text_table
from harness.variants import variant_label

YES, MAY, NO = "yes", "may", "no"
UNSTATED = "not stated"  # a setting the paper cell does not give: whether it differs is unknown
GROUPS = ("protocol", "data", "weights", "adapter", "result", "execution", "device", "software")
# model-block fields that describe the weights (their hash, model_identity, says whether they are the same)
_LABELS = {"name": "a label", "checkpoint": "where the file lies"}
_FEATURE_PATH = {"reg_tokens": "register tokens run through every block",
                 "pos_interp": "how position embeddings are resized for other input sizes"}
_DEVICE = {"device": "another device computes in another order (rounding)",
           "device_type": "a GPU rounds otherwise than the CPU (and records are keyed by it)",
           "gpu": "another GPU model's kernels round otherwise", "precision": "the arithmetic the run computed in",
           "world_size": "sharded extraction / training over another number of processes",
           "cpu": "another CPU's kernels round otherwise", "threads": "another reduction order (rounding only)"}
_SOFTWARE = ("torch", "timm", "python", "harness_version", "git_commit", "dirty")


@dataclass
class Side:
    """One side of the comparison: a result record, or a paper cell as its table states it."""

    label: str
    protocol: str
    params: dict[str, Any]  # record: protocol.params; paper cell: the table's protocol settings
    fingerprint: str | None
    request: str | None
    data: dict[str, Any]  # dataset, split, data_root, data_stamp
    model: dict[str, Any]
    variant: dict[str, Any] = field(default_factory=dict)
    seed: Any = None
    cost: dict[str, Any] = field(default_factory=dict)
    provenance: dict[str, Any] = field(default_factory=dict)
    paper: Any = None  # PaperCell for a table cell
    unstated: dict[str, str] = field(default_factory=dict)  # paper cell: setting -> why the table does not state it


@dataclass
class PaperCell:
    table: str
    row: str
    cell: Any  # the CSV row (pandas Series)
    want_variant: dict[str, Any]  # what a record must carry to count for the cell (harness.paper.verdict)
    zoo: Any  # the ZooEntry of the cell's checkpoint, or None
    n_train: int | None
    n_val: int | None


@dataclass
class Difference:
    group: str
    setting: str
    a: Any
    b: Any
    effect: str  # YES | MAY | NO
    why: str


# ----------------------------------------------------------------------------- sides
def record_side(rec: dict, where: str = "") -> Side:
    p = rec["protocol"]
    metrics = {k: v for k, v in (rec.get("metrics") or {}).items() if isinstance(v, (int, float))}
    best = headline_metric(p["name"], metrics)
    number = f": {best} {metrics[best]:.2f}{_direction_note(p['name'], best)}" if best is not None else ""
    what = ", ".join(x for x in (f"seed {rec['seed']}" if rec.get("seed") is not None else "",
                                 variant_label(rec.get("variant"))) if x)
    label = (f"record {rec.get('id', '?')} ({rec['model']['name']}, {p['name']} {p.get('dataset')}/{p.get('split')}"
             f"{', ' + what if what else ''}){number}{' ' + where if where else ''}")
    return Side(label, p["name"], dict(p.get("params") or {}), p.get("fingerprint"), p.get("request"),
                {k: p.get(k) for k in ("dataset", "split", "data_root", "data_stamp")}, dict(rec["model"]),
                dict(rec.get("variant") or {}), rec.get("seed"), dict(rec.get("cost") or {}),
                dict(rec.get("provenance") or {}))


def _direction_note(protocol: str, metric: str) -> str:
    """" (lower is better)" after a lower-is-better number, so that a difference reads the right way."""
    return "" if metric_of(protocol, metric).higher_is_better else " (lower is better)"


def _load_record_file(path: Path) -> dict:
    try:
        rec = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ConfigError(f"{path}: not a readable result record ({exc})") from exc
    if not is_record(rec):
        raise ConfigError(f"{path}: not a result record (a record names its model and its protocol)")
    return rec


def _record_by_id(spec: str, folder: Path) -> dict | None:
    exact = folder / f"{spec}.json"
    if exact.is_file():
        return _load_record_file(exact)
    if len(spec) < 6 or not all(c in "0123456789abcdef" for c in spec):
        return None
    hits = sorted(folder.glob(f"{spec}*.json"))
    if len(hits) > 1:
        raise ConfigError(f"record id prefix {spec!r} names {len(hits)} records in {folder} "
                          f"({', '.join(h.stem for h in hits[:5])}{', ...' if len(hits) > 5 else ''}); "
                          "give more digits")
    return _load_record_file(hits[0]) if hits else None


def _run_key(rec: dict) -> tuple:
    p = rec["protocol"]
    return (p["name"], p.get("dataset"), p.get("split"), p.get("fingerprint"), p.get("request"), p.get("data_root"),
            p.get("data_stamp"), model_identity(rec["model"]), (rec.get("cost") or {}).get("device_type", "cpu"))


def _fits(rec: dict, want: dict[str, Any]) -> bool:
    return _variant_differences(rec.get("variant") or {}, want) == []


def model_records(model: str, records: list[dict], protocol: str | None, datasets: list[str] | None,
                  where: Path, wants: list[dict] | None = None) -> list[dict]:
    """The records of one run of ``model`` on ``protocol`` (one dataset of ``datasets`` when given;
    among several runs, the one with a record of a variant in ``wants``, e.g. a paper cell's):
    an error names the choices when the model has no such record or several runs."""
    mine = [r for r in records if r["model"]["name"] == model]
    if not mine:
        return []
    protocols = sorted({r["protocol"]["name"] for r in mine})
    if protocol is None:
        if len(protocols) != 1:
            raise ConfigError(f"model {model!r} has records of {', '.join(protocols)} under {where}; "
                              f"say which with --protocol")
        protocol = protocols[0]
    run = [r for r in mine if r["protocol"]["name"] == protocol]
    if not run:
        raise ConfigError(f"model {model!r} has no {protocol} record under {where}; its protocols: "
                          f"{', '.join(protocols)}")
    if datasets:
        on = [r for r in run if r["protocol"].get("dataset") in datasets]
        run = on or run
    runs: dict[tuple, list[dict]] = {}
    for r in run:
        runs.setdefault(_run_key(r), []).append(r)
    if len(runs) > 1 and wants:
        fitting = {k: recs for k, recs in runs.items() if any(_fits(r, w) for r in recs for w in wants)}
        runs = fitting or runs
    if len(runs) > 1:
        lines = [f"{recs[0]['id']} ({key[1]}/{key[2]}, fingerprint {str(key[3])[:8]}, {len(recs)} records)"
                 for key, recs in runs.items()]
        raise ConfigError(f"model {model!r} has {len(runs)} {protocol} runs under {where}: {'; '.join(lines)}; "
                          f"give a record id, or --dataset")
    return run


def _pick(records: list[dict], wants: list[dict] | None) -> dict:
    """The newest record whose variant matches one of ``wants`` (a paper cell's or the other
    record's), else the newest."""
    ordered = sorted(records, key=lambda r: (str(r.get("created") or ""), str(r.get("id"))))
    fitting = [r for r in ordered if any(_fits(r, w) for w in wants or [])]
    return (fitting or ordered)[-1]


def _paper_spec(spec: str) -> tuple[str, str] | None:
    """(table, row) of ``TABLE:ROW`` when TABLE is a shipped table or a table YAML, else None."""
    from harness.paper.spec import list_tables

    if ":" not in spec:
        return None
    table, row = spec.rsplit(":", 1)
    if table in list_tables() or (Path(table).suffix in (".yaml", ".yml") and Path(table).is_file()):
        return table, row
    return None


def paper_side(table: str, row: str, other: Side | None, protocol: str | None = None,
               dataset: str | None = None) -> Side:
    """Row ``row`` of paper table ``table`` as a side: the cell of the other side's protocol and
    data set (and variant, when several cells remain)."""
    from harness.models.zoo import load_zoo
    from harness.paper.plan import job_values
    from harness.paper.spec import load_table, settings_of
    from harness.paper.verdict import cell_variant
    from harness.protocol_info import build_protocol

    tab = load_table(table)
    cells = tab.rows[tab.rows["row"].astype(str) == str(row)]
    if cells.empty:
        rows = list(dict.fromkeys(tab.rows["row"].astype(str)))
        raise ConfigError(f"paper table {tab.name} has no row {row!r}; its rows: {', '.join(rows)}")
    protocol = other.protocol if other is not None else protocol
    if protocol is not None:
        if protocol not in set(cells["protocol"]):
            raise ConfigError(f"row {row} of paper table {tab.name} has no {protocol} cell; its protocols: "
                              f"{', '.join(sorted(set(cells['protocol'])))}")
        cells = cells[cells["protocol"] == protocol]
    dataset = other.data.get("dataset") if other is not None else dataset
    if dataset is not None:
        on = cells[[d == dataset or tab.spec.datasets[d].reader == dataset for d in cells["dataset"]]]
        cells = on if len(on) else cells
    if len(set(cells["protocol"])) > 1 or len(set(cells["dataset"])) > 1:
        raise ConfigError(f"row {row} of paper table {tab.name} has cells of "
                          f"{', '.join(sorted(set(cells['protocol'] + '/' + cells['dataset'])))}; "
                          f"say which with --protocol / --dataset")
    ps = tab.spec.protocols[cells.iloc[0]["protocol"]]
    arch = {"patch_size": (other.model.get("patch_size") if other is not None else None)}
    candidates = []
    for _, cell in cells.iterrows():
        settings = settings_of(cell["variant"], ps)
        candidates.append((cell, settings, cell_variant(cell, ps, settings)))
    if other is not None:  # the cell the other side's variant belongs to, if any
        fitting = [c for c in candidates if not _variant_differences(other.variant, c[2])]
        candidates = fitting or candidates
    cell, settings, want = candidates[0]
    zoo = load_zoo().get(cell["zoo_name"]) if cell["zoo_name"] else None
    if zoo is not None:
        arch["patch_size"] = zoo.patch_size
    values, unstated = _cell_values(ps, settings, arch["patch_size"], job_values)
    ds = tab.spec.datasets[cell["dataset"]]
    proto = build_protocol(cell["protocol"], ps.preset, {"dataset": ds.reader, **values}, source=str(tab.source))
    model = {"name": cell["zoo_name"] or None, "method": cell["method"], "arch": cell["arch"],
             "pretrain_data": cell["pretrain_data"], "epochs": cell["epochs"]}
    label = (f"paper {tab.name}:{row} ({cell['method']} {cell['arch']} {cell['pretrain_data']}, {cell['protocol']} "
             f"{cell['dataset']} {cell['variant'] or '(no variant)'}"
             f"{', zoo ' + cell['zoo_name'] if cell['zoo_name'] else ''}): {cell['metric']} {cell['value']:g} published"
             f"{_direction_note(cell['protocol'], cell['metric'])}")
    return Side(label, cell["protocol"], proto.settings(), proto.fingerprint(), None,
                {"dataset": ds.reader, "split": ds.val_split}, model, want,
                paper=PaperCell(tab.name, str(row), cell, want, zoo, ds.n_train, ds.n_val), unstated=unstated)


def _cell_values(ps, settings: str, patch, job_values) -> tuple[dict, dict[str, str]]:
    """A cell's protocol values, and the settings it leaves unstated: those the table gives per
    patch size (``by_patch``) when the model's patch size is not among them or not known."""
    import dataclasses

    if not ps.by_patch or (patch is not None and int(patch) in {int(k) for k in ps.by_patch}):
        values, _ = job_values(ps, settings, {"patch_size": patch})
        return values, {}
    values, _ = job_values(dataclasses.replace(ps, by_patch={}), settings, None)
    sizes = sorted(int(k) for k in ps.by_patch)
    why = (f"the table states it for patch sizes {', '.join(map(str, sizes))} only, "
           f"{'and the patch size is not known' if patch is None else f'not for patch {patch}'}")
    return values, {k: why for per in ps.by_patch.values() for k in per}


def _row_hints(paper: tuple[str, str], protocol: str | None,
               datasets: list[str] | None) -> tuple[str | None, list[str] | None, list[dict]]:
    """What a paper row tells about the run of a model to compare with it: (protocol, the
    dataset readers, the variants its records must carry), from the row's cells."""
    from harness.paper.spec import load_table, settings_of
    from harness.paper.verdict import cell_variant

    tab = load_table(paper[0])
    cells = tab.rows[tab.rows["row"].astype(str) == str(paper[1])]
    if protocol is None and len(set(cells["protocol"])) == 1:
        protocol = cells.iloc[0]["protocol"]
    if protocol is not None:
        cells = cells[cells["protocol"] == protocol]
    wants = []
    for _, cell in cells.iterrows():
        ps = tab.spec.protocols[cell["protocol"]]
        settings = settings_of(cell["variant"], ps)
        wants.append(cell_variant(cell, ps, settings))
    return protocol, datasets or [tab.spec.datasets[d].reader for d in cells["dataset"]], wants


def resolve_sides(spec_a: str, spec_b: str, runs: str | Path | None = None, protocol: str | None = None,
                  dataset: str | None = None) -> tuple[Side, Side]:
    """The two sides named on the command line (see the module docstring)."""
    folder = Path(runs) if runs else runs_dir()
    kinds = {}
    for name, spec in (("A", spec_a), ("B", spec_b)):
        if Path(spec).is_file() and spec.endswith(".json"):
            kinds[name] = ("record", _load_record_file(Path(spec)))
        elif _paper_spec(spec) is not None:
            kinds[name] = ("paper", _paper_spec(spec))
        else:
            rec = _record_by_id(spec, folder) if folder.is_dir() else None
            kinds[name] = ("record", rec) if rec is not None else ("model", spec)
    if kinds["A"][0] == "paper" and kinds["B"][0] == "paper":
        raise ConfigError("explain compares a record with a record or with a paper cell, not two paper cells")
    records = None
    sides: dict[str, Side] = {}
    models = [what for kind, what in kinds.values() if kind == "model"]
    if kinds["A"][0] == kinds["B"][0] == "model":
        records = _records_of(folder, models)
        return _model_pair(kinds["A"][1], kinds["B"][1], records, protocol, dataset, folder)
    for name in ("A", "B"):  # records first: they tell a model or a paper cell which run to take
        kind, what = kinds[name]
        if kind == "record":
            sides[name] = record_side(what)
    for name, other in (("A", "B"), ("B", "A")):
        kind, what = kinds[name]
        if kind != "model":
            continue
        if records is None:
            records = _records_of(folder, models)
        hint = sides.get(other)
        paper = kinds[other][1] if kinds[other][0] == "paper" else None
        want_protocol = protocol or (hint.protocol if hint is not None else None)
        datasets = [dataset] if dataset else ([hint.data.get("dataset")] if hint is not None else None)
        wants = [hint.variant] if hint is not None else None
        if paper is not None and hint is None:
            want_protocol, datasets, wants = _row_hints(paper, want_protocol, datasets)
        found = _found(what, model_records(what, records, want_protocol, datasets, folder, wants), records, folder)
        sides[name] = record_side(_pick(found, wants))
    for name, other in (("A", "B"), ("B", "A")):
        if kinds[name][0] == "paper":
            sides[name] = paper_side(*kinds[name][1], sides[other], protocol, dataset)
    return sides["A"], sides["B"]


def _records_of(folder: Path, models: list[str]) -> list[dict]:
    """The records of ``models`` in a records folder, looked up by model name in its index."""
    if not folder.is_dir():
        return []
    index = index_of(folder)
    return [r for m in dict.fromkeys(models) for r in index.records(model=m) if is_record(r)]


def _found(what: str, found: list[dict], records: list[dict], folder: Path) -> list[dict]:
    if not found:
        names = sorted({r.model for r in index_of(folder).served()}) if folder.is_dir() else []
        raise ConfigError(f"{what!r} is no record file, record id, model name or paper cell (TABLE:ROW) "
                          f"under {folder}; models there: {', '.join(names) or '(none)'}")
    return found


def _model_pair(name_a: str, name_b: str, records: list[dict], protocol: str | None, dataset: str | None,
                folder: Path) -> tuple[Side, Side]:
    """Two model names: records of one protocol and data set that are like with like, the same
    variant and the same seed (the newest such pair), so that the comparison lists what differs
    between the models, not between two results of a run (another seed's subsets, another k)."""
    found_a = _found(name_a, model_records(name_a, records, protocol, [dataset] if dataset else None, folder),
                     records, folder)
    first = found_a[0]["protocol"]
    found_b = _found(name_b, model_records(name_b, records, protocol or first["name"],
                                           [dataset or first.get("dataset")], folder), records, folder)
    def newest(recs: list[dict]) -> list[dict]:
        return sorted(recs, key=lambda r: (str(r.get("created") or ""), str(r.get("id"))), reverse=True)

    for ra in newest(found_a):
        for rb in newest(found_b):
            if ra.get("seed") == rb.get("seed") and _same(ra.get("variant") or {}, rb.get("variant") or {}):
                return record_side(ra), record_side(rb)
    ra = newest(found_a)[0]  # no pair alike: the other side's closest, and the list says what differs
    return record_side(ra), record_side(_pick(found_b, [ra.get("variant") or {}]))


# ----------------------------------------------------------------------------- differences
def _norm(v: Any) -> Any:
    return json.loads(json.dumps(v, default=str))


def _same(a: Any, b: Any) -> bool:
    return _norm(a) == _norm(b)


def _variant_differences(have: dict, want: dict) -> list[tuple[str, Any, Any]]:
    """(key, have, want) for every key of ``want`` that ``have`` does not match (None = must be absent)."""
    from harness.paper.spec import same_variant_value

    out = []
    for k, v in want.items():
        if v is None:
            if k in have:
                out.append((k, have[k], "(absent)"))
        elif k not in have or not same_variant_value(v, have[k]):
            out.append((k, have.get(k, "(absent)"), v))
    return out


def _protocol_differences(a: Side, b: Side) -> tuple[list[Difference], list[Difference]]:
    """(settings that differ, what the runs reported that differs)."""
    diffs: list[Difference] = []
    reported: list[Difference] = []
    if a.protocol != b.protocol:
        diffs.append(Difference("protocol", "protocol", a.protocol, b.protocol, YES, "another protocol"))
    kinds = setting_names(a.protocol) if a.protocol == b.protocol else None
    paper = a.paper is not None or b.paper is not None
    fingerprinted, execution = kinds if kinds else (set(), set())
    cell = a if a.paper is not None else (b if b.paper is not None else None)
    unstated = cell.unstated if cell is not None else {}
    for key in sorted(set(a.params) | set(b.params)):
        va, vb = a.params.get(key, "(absent)"), b.params.get(key, "(absent)")
        if key in unstated:  # never "changes the number": the cell gives no value to differ from
            va, vb = ("(not stated)", vb) if cell is a else (va, "(not stated)")
            diffs.append(Difference("protocol", key, va, vb, UNSTATED, unstated[key]))
            continue
        if _same(va, vb):
            continue
        if kinds is None:
            diffs.append(Difference("protocol", key, va, vb, MAY, f"protocol {a.protocol!r} is not registered here "
                                    "(or the two differ): a setting or an outcome of the run, the fingerprint says"))
        elif key in fingerprinted:
            diffs.append(Difference("protocol", key, va, vb, YES, "protocol setting in the fingerprint"))
        elif key in execution:
            if not paper:
                diffs.append(Difference("execution", key, va, vb, NO, "execution only (NOT_IN_FINGERPRINT)"))
        elif not paper and not (key.endswith("seconds") or key.endswith("_s")):
            reported.append(Difference("reported", key, va, vb, "-", "reported by the run"))
    if a.fingerprint != b.fingerprint:
        if not any(d.effect == YES for d in diffs) and unstated:
            diffs.append(Difference("protocol", "fingerprint", a.fingerprint, b.fingerprint, UNSTATED,
                                    "the hashes differ in settings the paper cell does not state"))
            return diffs, reported
        if not any(d.effect == YES for d in diffs):
            why = ("the settings behind it differ beyond those recorded: a protocol setting that only the hash "
                   "holds (its settings block does not list it)")
        else:
            why = "the hash of the settings that change the number"
        diffs.append(Difference("protocol", "fingerprint", a.fingerprint, b.fingerprint, YES, why))
    elif a.request and b.request and a.request != b.request:
        names = ", ".join(sorted(execution)) or "none declared"
        diffs.append(Difference("execution", "request", a.request, b.request, NO,
                                f"same fingerprint: only execution settings differ ({names})"))
    return diffs, reported


def _data_differences(a: Side, b: Side) -> list[Difference]:
    diffs = []
    for key in ("dataset", "split"):
        if not _same(a.data.get(key), b.data.get(key)):
            diffs.append(Difference("data", key, a.data.get(key), b.data.get(key), YES, f"another {key}"))
    paper = a.paper or b.paper
    if paper is not None:
        rec = a if b.paper is not None else b
        for key, stated in (("n_train", paper.n_train), ("n_val", paper.n_val)):
            have = rec.params.get(key)
            if stated is not None and have is not None and int(have) != int(stated):
                da, db = (have, stated) if rec is a else (stated, have)
                diffs.append(Difference("data", key, da, db, YES, "another number of images: another data set"))
        return diffs
    if a.data.get("data_stamp") != b.data.get("data_stamp"):
        diffs.append(Difference("data", "data_stamp", a.data.get("data_stamp"), b.data.get("data_stamp"), YES,
                                "other data (SynthScenes: another generator version, preset or seed; "
                                "real data: another root)"))
        if a.data.get("data_root") != b.data.get("data_root"):
            diffs.append(Difference("data", "data_root", a.data.get("data_root"), b.data.get("data_root"), YES,
                                    "another data folder"))
    elif a.data.get("data_root") != b.data.get("data_root"):
        diffs.append(Difference("data", "data_root", a.data.get("data_root"), b.data.get("data_root"), NO,
                                "same data stamp: the same generated data set in another folder"))
    return diffs


def _model_differences(a: Side, b: Side) -> list[Difference]:
    if a.paper is not None or b.paper is not None:
        return _model_vs_paper(a, b)
    same_weights = model_identity(a.model) == model_identity(b.model)
    diffs = []
    if not same_weights:
        diffs.append(Difference("weights", "weights", model_identity(a.model), model_identity(b.model), YES,
                                "other weights (verified checkpoint sha256, or a random init's tensor hash)"))
    for key in sorted((set(a.model) | set(b.model)) - {"weights_key", "adapter", "spec"}):
        va, vb = a.model.get(key), b.model.get(key)
        if _same(va, vb):
            continue
        if key in _FEATURE_PATH:
            diffs.append(Difference("weights", key, va, vb, YES, _FEATURE_PATH[key]))
        elif key in _LABELS:
            diffs.append(Difference("weights", key, va, vb, NO, _LABELS[key]))
        elif not same_weights:
            diffs.append(Difference("weights", key, va, vb, YES, "describes the other weights"))
        else:
            diffs.append(Difference("weights", key, va, vb, NO, "metadata only: the weights hash is the same"))
    ada, adb = a.model.get("adapter") or {}, b.model.get("adapter") or {}
    for key in sorted(set(ada) | set(adb)):
        if not _same(ada.get(key), adb.get(key)):
            diffs.append(Difference("adapter", f"adapter.{key}", ada.get(key, "(none)"), adb.get(key, "(none)"), YES,
                                    "how a foreign model's features are read (keyed)"))
    if not _same(a.model.get("spec"), b.model.get("spec")):
        diffs.append(Difference("adapter", "spec", a.model.get("spec"), b.model.get("spec"), YES,
                                "the model spec: source, weights and adapter options"))
    return diffs


def _model_vs_paper(a: Side, b: Side) -> list[Difference]:
    rec, cell = (a, b) if b.paper is not None else (b, a)
    pc = cell.paper
    out = []

    def add(setting, have, stated, effect, why):
        da, db = (have, stated) if rec is a else (stated, have)
        out.append(Difference("weights", setting, da, db, effect, why))

    zoo = pc.zoo
    if not pc.cell["zoo_name"]:
        add("checkpoint", rec.model.get("name"), "(no public checkpoint)", MAY,
            "the table names no checkpoint for this row: the weights cannot be compared")
        return out
    if rec.model.get("name") != pc.cell["zoo_name"]:
        add("model", rec.model.get("name"), pc.cell["zoo_name"], YES,
            "not the table's checkpoint (a table's cells are measured on its zoo checkpoint, by name)")
    if zoo is not None:
        if zoo.shipped and rec.model.get("checkpoint_sha256") != zoo.sha256:
            add("checkpoint_sha256", rec.model.get("checkpoint_sha256"), zoo.sha256, YES,
                "other weights than the shipped file")
        # the structure only: pretraining data and epochs are free text in the zoo and the checkpoints
        for key, stated in (("arch", zoo.arch), ("patch_size", zoo.patch_size)):
            have = rec.model.get(key)
            if stated is not None and have is not None and not _same(have, stated):
                add(key, have, stated, YES, "describes other weights than the table's checkpoint")
    for key in ("adapter", "spec"):
        if rec.model.get(key):
            add(key, rec.model[key], "(a zoo ViT)", YES, "a foreign model read through an adapter")
    return out


def _result_differences(a: Side, b: Side) -> list[Difference]:
    if a.paper is not None or b.paper is not None:
        rec, cell = (a, b) if b.paper is not None else (b, a)
        out = []
        for key, have, want in _variant_differences(rec.variant, cell.variant):
            da, db = (have, want) if rec is a else (want, have)
            out.append(Difference("result", f"variant.{key}", da, db, YES,
                                  "another result of the run than the cell's"))
        return out
    out = []
    if a.seed != b.seed:
        out.append(Difference("result", "seed", a.seed, b.seed, YES, "another random draw (subsets, head init, ...)"))
    for key in sorted(set(a.variant) | set(b.variant)):
        va, vb = a.variant.get(key, "(absent)"), b.variant.get(key, "(absent)")
        if not _same(va, vb):
            out.append(Difference("result", f"variant.{key}", va, vb, YES, "another result of the run"))
    return out


def _machine_differences(a: Side, b: Side) -> list[Difference]:
    if a.paper is not None or b.paper is not None:
        rec = a if b.paper is not None else b
        stated = ", ".join(f"{k} {rec.cost[k]}" for k in ("device_type", "gpu", "precision") if rec.cost.get(k)) + \
            "".join(f", {k} {rec.provenance[k]}" for k in ("torch", "timm") if rec.provenance.get(k))
        have, other = (stated or "(not recorded)"), "(not stated by the table)"
        da, db = (have, other) if rec is a else (other, have)
        return [Difference("device", "device, precision, libraries", da, db, MAY,
                           "the table states none: kernels and rounding may differ")]
    out = []
    for key, why in _DEVICE.items():
        if key == "precision" and "precision" in a.params and "precision" in b.params:
            continue  # a protocol setting: compared above
        va, vb = a.cost.get(key), b.cost.get(key)
        if not _same(va, vb):
            out.append(Difference("device", key, va, vb, MAY, why))
    for key in _SOFTWARE:
        va, vb = a.provenance.get(key), b.provenance.get(key)
        if not _same(va, vb):
            out.append(Difference("software", key, va, vb, MAY, "other library or harness code (kernels, defaults)"))
    if not _same(a.provenance.get("host"), b.provenance.get("host")):
        out.append(Difference("software", "host", a.provenance.get("host"), b.provenance.get("host"), NO,
                              "a machine name (its device and CPU are compared above)"))
    return out


def explain(a: Side, b: Side) -> tuple[list[Difference], list[Difference]]:
    """(every setting that differs, in GROUPS order; what the runs reported that differs)."""
    settings, reported = _protocol_differences(a, b)
    diffs = (settings + _data_differences(a, b) + _model_differences(a, b) + _result_differences(a, b)
             + _machine_differences(a, b))
    diffs.sort(key=lambda d: GROUPS.index(d.group))
    return diffs, reported


# ----------------------------------------------------------------------------- text
def _show(v: Any, width: int = 48) -> str:
    text = v if isinstance(v, str) else json.dumps(_norm(v))
    return text if len(text) <= width else text[:width - 3] + "..."


def format_explanation(a: Side, b: Side, diffs: list[Difference], reported: list[Difference]) -> str:
    out = [f"A = {a.label}", f"B = {b.label}", ""]
    counts = {e: sum(d.effect == e for d in diffs) for e in (YES, MAY, NO, UNSTATED)}
    if not diffs:
        out.append("A and B agree on every recorded setting (protocol, data, weights, adapter, seed, variant, "
                   "device, libraries).")
    else:
        out.append(f"{len(diffs)} settings differ: {counts[YES]} can change the number, {counts[MAY]} may "
                   f"(rounding, kernels), {counts[NO]} cannot"
                   + (f"; {counts[UNSTATED]} not stated by the paper cell" if counts[UNSTATED] else ""))
        out.append(text_table(["group", "setting", "A", "B", "changes the number", "why"],
                              [[d.group, d.setting, _show(d.a), _show(d.b), d.effect, d.why] for d in diffs]))
    if a.fingerprint == b.fingerprint and a.protocol == b.protocol:
        out.append(f"same protocol fingerprint {a.fingerprint}: every setting that can change the number is equal")
    if reported:
        out += ["", "reported by the runs (consequences of the above, not causes):"]
        out += [f"  {d.setting}: {_show(d.a, 32)} vs {_show(d.b, 32)}" for d in reported]
    return "\n".join(out)


# ----------------------------------------------------------------------------- CLI
def add_cli(subparsers) -> None:
    e = subparsers.add_parser("explain", help="why two numbers differ: every setting that differs between two "
                                              "records, or a record and a paper cell, and whether it can change "
                                              "the number")
    e.add_argument("a", help="record file, record id, model name (with --protocol) or paper cell TABLE:ROW")
    e.add_argument("b", help="record file, record id, model name (with --protocol) or paper cell TABLE:ROW")
    e.add_argument("--runs", default=None, help=f"records folder for ids and model names (default {runs_dir()})")
    e.add_argument("--protocol", default=None, help="the protocol of a model name's records (or of a paper row)")
    e.add_argument("--dataset", default=None, help="the dataset of a model name's records, where it has several")
    e.set_defaults(func=cmd_explain)


def cmd_explain(args) -> int:
    a, b = resolve_sides(args.a, args.b, args.runs, args.protocol, args.dataset)
    diffs, reported = explain(a, b)
    print(format_explanation(a, b, diffs, reported))
    return 0


__all__ = ["YES", "MAY", "NO", "GROUPS", "Side", "PaperCell", "Difference", "record_side", "paper_side",
           "model_records", "resolve_sides", "explain", "format_explanation", "add_cli",
           "cmd_explain"]
