"""Train the SynthScenes zoo and register it as shipped checkpoints.

    python -m scripts.synthscenes_zoo train --out RUNS [--only synth_dino ...]
    python -m scripts.synthscenes_zoo register --runs RUNS [--only synth_ibot ...]
    python -m scripts.synthscenes_zoo table --records RESULTS/runs [--add]

`train` generates SynthScenes (the recipes file's preset and seed, cached under
SSL_BENCH_HOME) and runs each recipe of configs/zoo/synthscenes_recipes.yaml as its own
`ssl-bench pretrain` (methods) or `ssl-bench supervised` (the supervised reference) process,
one after another, into RUNS/<name>/; beside each run it writes provenance.json: the exact
command (with the placeholders `{synthscenes}` and `{out}` for this machine's folders, which
`ssl-bench zoo command NAME` resolves on another), the data folder, the code commit and whether the tree was clean,
the machine, torch, and the wall time.
A run cut off resumes from RUNS/<name>/resume.pt when `train` is run again.

`register` copies each run's backbone into configs/zoo/synthscenes/<name>.safetensors (+ .json,
+ .log.jsonl: the training log) and writes configs/zoo/synthscenes.yaml: one zoo entry per
checkpoint with its sha256, size and provenance. With `--only NAME ...` it registers those runs
and keeps the zoo file's other entries as they are.

`table` writes results/paper/synthscenes.csv, the "published" numbers of the SynthScenes table
(configs/paper/synthscenes.yaml): for every cell, the mean over seeds of the records a default
run (`python run_benchmark.py`) wrote for the shipped checkpoints under the table's settings;
with `--add`, the cells already in the CSV stay as they are and only the missing ones are added
(a protocol that joined the default run after the zoo was made).
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import platform
import shutil
import subprocess
import sys
import time
from pathlib import Path

import yaml

from harness.config import CONFIG_ROOT
from harness.io_utils import sha256_file

ROOT = Path(__file__).resolve().parent.parent

RECIPES = CONFIG_ROOT / "zoo" / "synthscenes_recipes.yaml"
SHIPPED = CONFIG_ROOT / "zoo" / "synthscenes"
ZOO_FILE = CONFIG_ROOT / "zoo" / "synthscenes.yaml"


def load_recipes() -> dict:
    return yaml.safe_load(RECIPES.read_text())


def recipe_command(recipe: dict, data_root: str | Path = "{synthscenes}", out: str | Path = "{out}") -> list[str]:
    """The ssl-bench arguments that train one recipe into ``out``; by default with the
    placeholders the zoo records (harness.models.zoo.recorded_command resolves them)."""
    if "pretrain" in recipe:
        sets = [a for s in recipe.get("set", []) for a in ("--set", s)]
        return ["pretrain", recipe["pretrain"], *sets, "--data-root", str(data_root),
                "--out", str(out), "--no-progress"]
    sets = [a for k, v in recipe["supervised"].items() for a in ("--set", f"{k}={v}")]
    return ["supervised", *sets, "--data-root", str(data_root), "--out", str(out), "--no-progress"]


def git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True).stdout.strip()


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine() -> dict:
    import torch

    return {"device": "cpu", "cpu": cpu_model(), "threads": torch.get_num_threads(),
            "torch": torch.__version__, "python": platform.python_version(), "platform": platform.platform()}


def train(args) -> None:
    from harness.data.synthetic import default_root, generate

    spec = load_recipes()
    data_root = default_root(spec["data"]["synth_preset"], spec["data"]["synth_seed"])
    generate(data_root, preset=spec["data"]["synth_preset"], seed=spec["data"]["synth_seed"])
    runs = Path(args.out)
    for name, recipe in spec["recipes"].items():
        if args.only and name not in args.only:
            continue
        out = runs / name
        cmd = recipe_command(recipe, data_root, out)
        print(f"== {name}: ssl-bench {' '.join(cmd)}", flush=True)
        start = dt.datetime.now(dt.timezone.utc)
        t0 = time.perf_counter()
        subprocess.run([sys.executable, str(ROOT / "run_benchmark.py"), *cmd], cwd=ROOT, check=True)
        # recorded with the placeholders of this machine's folders, so that it runs anywhere
        prov = {"command": " ".join(["ssl-bench", *recipe_command(recipe)]), "data_root": str(data_root),
                "recipe": recipe,
                "code_commit": git("rev-parse", "HEAD"), "tree_clean": git("status", "--porcelain") == "",
                "started": start.isoformat(timespec="seconds"), "wall_s": round(time.perf_counter() - t0, 1),
                "made_by": "python -m scripts.synthscenes_zoo train", **machine()}
        (out / "provenance.json").write_text(json.dumps(prov, indent=2) + "\n")
        print(f"== {name}: {prov['wall_s']} s", flush=True)


def register(args) -> None:
    from harness.models.checkpoints import load_checkpoint
    from harness.data.io import data_stamp

    spec = load_recipes()
    runs = Path(args.runs)
    SHIPPED.mkdir(parents=True, exist_ok=True)
    unknown = sorted(set(args.only or ()) - set(spec["recipes"]))
    if unknown:
        raise SystemExit(f"--only {unknown}: no such recipe; known: {', '.join(spec['recipes'])}")
    kept = {e["name"]: e for e in yaml.safe_load(ZOO_FILE.read_text())["checkpoints"]} if args.only else {}
    entries = []
    for name, recipe in spec["recipes"].items():
        if args.only and name not in args.only:
            if name not in kept:
                raise SystemExit(f"{ZOO_FILE} has no entry {name!r} to keep; register it too")
            entries.append(kept[name])
            continue
        run = runs / name
        prov = json.loads((run / "provenance.json").read_text())
        if prov["recipe"] != recipe:
            raise SystemExit(f"{run}: trained with recipe {prov['recipe']}, the recipes file now says {recipe}")
        _, meta = load_checkpoint(run / "backbone.safetensors")
        weights = SHIPPED / f"{name}.safetensors"
        shutil.copyfile(run / "backbone.safetensors", weights)
        shipped_meta = {k: v for k, v in meta.items() if k not in ("weights_mtime_ns",)}
        shipped_meta["weights_mtime_ns"] = weights.stat().st_mtime_ns
        (SHIPPED / f"{name}.json").write_text(json.dumps(shipped_meta, indent=2) + "\n")
        keep = ("step", "epoch", "lr", "loss")
        rows = [json.loads(r) for r in (run / "log.jsonl").read_text().splitlines() if r.strip()]
        log = SHIPPED / f"{name}.log.jsonl"
        log.write_text("".join(json.dumps({k: v for k, v in r.items() if k in keep or k.startswith("loss")})
                               + "\n" for r in rows))
        data_root = Path(prov["data_root"])
        synth = json.loads((data_root / "meta.json").read_text())
        entries.append({
            "name": name, "method": meta["method"], "arch": meta["arch"], "patch_size": meta["patch_size"],
            "pretrain_data": f"SynthScenes {synth['preset']} seed {synth['seed']} v{synth['version']}",
            "epochs": None if meta.get("epochs") is None else round(meta["epochs"]),
            "layout": "harness", "file": f"synthscenes/{name}.safetensors", "url": "",
            "sha256": sha256_file(weights), "size": weights.stat().st_size,
            "source": "trained by ssl-bench (scripts/synthscenes_zoo.py)",
            "provenance": {
                "command": prov["command"], "recipe": recipe, "steps": meta.get("steps"),
                "config_fingerprint": meta.get("config_fingerprint"),
                "data": {"synthscenes": {k: synth[k] for k in ("version", "preset", "seed")},
                         "data_stamp": data_stamp(data_root)},
                "code_commit": prov["code_commit"], "tree_clean": prov["tree_clean"],
                "device": prov["device"], "cpu": prov["cpu"], "threads": prov["threads"],
                "torch": prov["torch"], "started": prov["started"], "wall_s": prov["wall_s"],
                "log": f"synthscenes/{name}.log.jsonl", "log_sha256": sha256_file(log),
                "made_by": prov["made_by"]}})
    header = ("# SynthScenes checkpoints trained by ssl-bench and shipped in configs/zoo/synthscenes/.\n"
              "# Written by `python -m scripts.synthscenes_zoo register`; the recipes:\n"
              "# configs/zoo/synthscenes_recipes.yaml. Verified (size, sha256) on every use.\n")
    ZOO_FILE.write_text(header + yaml.safe_dump({"checkpoints": entries}, sort_keys=False, width=100))
    print(f"wrote {ZOO_FILE} ({len(entries)} checkpoints)")


# the table's dataset key of a protocol whose reader another protocol also reads (robustness's
# imagefolder set is not the object set knn reads with the same reader)
TABLE_DATASET = {"robustness": "synth_robustness"}


def table(args) -> None:
    import pandas as pd

    from harness.paper.spec import CSV_COLUMNS, PAPER_DIR, load_table, variant_matches
    from harness.registry import PROTOCOLS
    from harness.results.records import iter_records
    from harness.models.zoo import load_zoo

    out = PAPER_DIR / "synthscenes.csv"
    if not out.is_file():  # the table spec is read with its CSV: start from an empty one
        out.write_text(",".join(CSV_COLUMNS) + "\n")
    tab = load_table("synthscenes")
    zoo = {n: e for n, e in load_zoo(ZOO_FILE).items()}
    records = list(iter_records(Path(args.records)))
    readers = {}
    for key, ds in tab.spec.datasets.items():  # a reader's first key; TABLE_DATASET names the others
        readers.setdefault(ds.reader, key)
    # the table's settings per protocol, as the fingerprint its records must carry
    wanted = {}
    for name, ps in tab.spec.protocols.items():
        for key, ds in tab.spec.datasets.items():
            try:
                proto = PROTOCOLS.get(name).from_preset(ps.preset, {"dataset": ds.reader, **ps.values})
            except Exception:  # noqa: BLE001 - e.g. the mmseg protocols without mmseg installed
                continue
            wanted[(name, ds.reader)] = proto.fingerprint()
    cells: dict[tuple, list[float]] = {}
    for r in records:
        proto, model = r["protocol"], r["model"]["name"]
        if model not in zoo or wanted.get((proto["name"], proto.get("dataset"))) != proto.get("fingerprint"):
            continue
        ps = tab.spec.protocols[proto["name"]]
        carried = r.get("variant") or {}
        if not variant_matches(ps.variant or {}, carried):
            continue  # another variant than the table's (e.g. a robustness shift other than the clean set)
        variant = {k: v for k, v in carried.items() if k not in (ps.variant or {})}
        if variant.get("lr", "best") != "best":  # one cell per lr sweep: the selected lr's
            continue
        if variant.get("fraction", "1/1") != "1/1":
            # a subset's seeds spread by more than the tolerance (their std is the subsets', not the
            # CPU's), which the verdict rule calls inconclusive: the table keeps the full bank
            continue
        label = ",".join(f"{k}={v}" for k, v in variant.items())
        for metric, value in (r.get("metrics") or {}).items():
            if metric.lower() not in ("top1", "miou", "acc", "map_m"):  # each protocol's headline
                continue
            dataset = TABLE_DATASET.get(proto["name"], readers[proto["dataset"]])
            key = (model, proto["name"], dataset, label, metric)
            cells.setdefault(key, []).append(float(value))
    rows = []
    if args.add:  # the cells already published stay as they are; the new ones follow them
        rows = pd.read_csv(out, dtype=str, keep_default_na=False).to_dict("records")
        have = {(r["zoo_name"], r["protocol"], r["dataset"], r["variant"], r["metric"]) for r in rows}
        cells = {k: v for k, v in cells.items() if k not in have}
    for i, ((model, protocol, dataset, variant, metric), values) in enumerate(sorted(cells.items()), len(rows)):
        e = zoo[model]
        rows.append({"paper": "ssl-bench SynthScenes zoo", "table": "synthscenes", "row": str(i + 1),
                     "method": e.method, "arch": e.arch, "pretrain_data": e.pretrain_data,
                     "epochs": "" if e.epochs is None else str(e.epochs), "protocol": protocol,
                     "dataset": dataset, "variant": variant, "metric": metric,
                     "value": round(sum(values) / len(values), 4), "zoo_name": model})
    pd.DataFrame(rows, columns=CSV_COLUMNS).to_csv(out, index=False)
    print(f"wrote {out} ({len(rows)} cells from {args.records})")


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("train")
    t.add_argument("--out", required=True)
    t.add_argument("--only", nargs="*", default=None)
    t.set_defaults(func=train)
    r = sub.add_parser("register")
    r.add_argument("--runs", required=True)
    r.add_argument("--only", nargs="*", default=None,
                   help="register these runs; the other entries of the zoo file stay as they are")
    r.set_defaults(func=register)
    tb = sub.add_parser("table")
    tb.add_argument("--records", required=True, help="a results/runs folder of a default run")
    tb.add_argument("--add", action="store_true",
                    help="keep the CSV's cells as they are and add the cells it does not have yet")
    tb.set_defaults(func=table)
    args = ap.parse_args(argv)
    args.func(args)


if __name__ == "__main__":
    main()
