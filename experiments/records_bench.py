"""Results at scale: `ssl-bench leaderboard` (the first call, which computes and keeps the
one-seed intervals, then again with the index and the intervals warm), `ssl-bench report` and
skip-if-done over 10,000 and 100,000 records (docs/benchmarks/suites.md, "Records at scale").

The records are copies of a realistic set (a run's records, by default results/runs: run
`ssl-bench` first) under other model names: copy k of model ``synth_dino`` is ``synth_dino_c0007``
with its own weights key and record id, every other field as measured. The commands run as
subprocesses, so their times include what a user waits for (Python start, imports, reading the
records through the index, writing every file). Printed per size: seconds, milliseconds per
record, and the time per record over the smallest size's (1.00: flat).

    python -m experiments.records_bench                            # 10,000 and 100,000 records
    python -m experiments.records_bench --sizes 1000 --keep DIR    # keep the folders
    python -m experiments.records_bench --report-max 10000         # the report only up to 10,000
    python -m experiments.records_bench --skip-check-max 0         # no skip-if-done timing
    python -m experiments.records_bench --warm-calls 5 --compare-code BASE   # five warm calls, median and
        # range, each followed by one of the checkout BASE (`git archive main | tar -x -C BASE`) on a
        # copy of the folder (its own index): the two codes side by side, in the same minutes
"""
from __future__ import annotations

import argparse
import copy
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

REPO = Path(__file__).resolve().parent.parent


def template_records(folder: Path) -> list[dict]:
    from harness.results.records import is_record

    found = []
    for p in sorted(folder.glob("*.json")):
        try:
            rec = json.loads(p.read_text())
        except ValueError:
            continue
        if is_record(rec):
            found.append(rec)
    if not found:
        sys.exit(f"error: no result records in {folder}; run `ssl-bench` first or give --template DIR")
    return found


def synthetic_records(templates: list[dict], n: int) -> list[dict]:
    """``n`` records: the templates again and again, copy k under model names ``<name>_c<k>``."""
    from harness.config import fingerprint

    out = []
    for i in range(n):
        copy_no, rec = divmod(i, len(templates))
        rec = copy.deepcopy(templates[rec])
        model = rec["model"]
        model["name"] = f"{model['name']}_c{copy_no:04d}"
        for key in ("weights_key", "checkpoint_sha256"):
            if model.get(key):
                model[key] = fingerprint([model[key], copy_no], length=64)
        rec["id"] = fingerprint([rec["id"], copy_no], length=20)
        out.append(rec)
    return out


def write_records(records: list[dict], folder: Path) -> float:
    from harness.results.records import write_record

    t0 = time.perf_counter()
    for rec in records:
        write_record(rec, folder)
    return time.perf_counter() - t0


def timed_cli(args: list[str], code: Path = REPO) -> float:
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, str(code / "run_benchmark.py"), *args], cwd=code,
                          capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        sys.exit(f"error: ssl-bench {' '.join(args)} exited {proc.returncode}:\n{proc.stderr[-2000:]}")
    return wall


def timed_cli_cpu(args: list[str], code: Path = REPO) -> tuple[float, float]:
    """(wall, CPU) seconds of one command: the child's user + system time, which a machine
    loaded by other work inflates less than the wall time."""
    import resource

    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    wall = timed_cli(args, code)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def skip_if_done(folder: Path) -> tuple[float, int, int]:
    """(seconds, pairs, records found): harness.running.evaluate.already_done for every
    (model, protocol request) of the folder, as a suite whose records all exist asks it."""
    from harness.results.records import iter_records
    from harness.running.evaluate import already_done

    pairs = {}
    for r in iter_records(folder):
        p, m = r["protocol"], r["model"]
        data = {k: p[k] for k in ("data_root", "data_stamp") if k in p}
        key = (m["name"], p["name"], p["fingerprint"], json.dumps(p.get("request"), sort_keys=True))
        pairs[key] = (m, p, data, r.get("cost", {}).get("device_type", "cpu"))
    t0 = time.perf_counter()
    found = 0
    for model, proto, data, device in pairs.values():
        handle = SimpleNamespace(name=model["name"], device=SimpleNamespace(type=device),
                                 record_info=lambda model=model: model)
        protocol = SimpleNamespace(registry_name=proto["name"])
        identity = SimpleNamespace(fingerprint=proto["fingerprint"], request=proto.get("request"), data=data,
                                   model_settings=model.get("protocol_settings") or {})
        found += len(already_done(handle, protocol, identity, folder))
    return time.perf_counter() - t0, len(pairs), found


def warm_series(folder: Path, out: Path, calls: int, compare_code: Path | None) -> dict[str, float]:
    """``calls`` more warm leaderboard calls (median, min, max); with ``compare_code`` each is
    followed by one of that checkout on a copy of the folder (made and warmed first: an index of
    another schema would be rebuilt in place), and the ratio of the two medians."""
    import shutil
    import statistics

    lb = lambda runs, o, code=REPO: timed_cli_cpu(["leaderboard", "--runs", str(runs), "--out", str(o)], code)  # noqa: E731
    other = folder.with_name(folder.name + "_compare")
    if compare_code is not None:
        shutil.rmtree(other, ignore_errors=True)
        shutil.copytree(folder, other)
        lb(other, out.with_name(out.name + "_compare"), compare_code)  # its index and kept table
    ours, theirs = [], []
    for _ in range(calls):
        ours.append(lb(folder, out))
        if compare_code is not None:
            theirs.append(lb(other, out.with_name(out.name + "_compare"), compare_code))
    wall, cpu = [w for w, _ in ours], [c for _, c in ours]
    found = {"warm median": statistics.median(wall), "warm min": min(wall), "warm max": max(wall),
             "warm CPU median": statistics.median(cpu)}
    if theirs:
        wall, cpu = [w for w, _ in theirs], [c for _, c in theirs]
        found.update({"compare median": statistics.median(wall), "compare min": min(wall),
                      "compare max": max(wall), "compare CPU median": statistics.median(cpu)})
        found["ratio"] = found["warm median"] / found["compare median"]
    return found


def measure(templates: list[dict], n: int, root: Path, report: bool, warm_calls: int = 1,
            compare_code: Path | None = None, skip_check: bool = True) -> dict[str, float]:
    """The seconds of each step over ``n`` records (a folder written first)."""
    folder, out = root / f"runs_{n}", root / f"out_{n}"
    times = {"write": write_records(synthetic_records(templates, n), folder)}
    times["leaderboard, first"] = timed_cli(["leaderboard", "--runs", str(folder), "--out", str(out)])
    times["leaderboard, warm"] = timed_cli(["leaderboard", "--runs", str(folder), "--out", str(out)])
    if warm_calls > 1 or compare_code is not None:
        times.update(warm_series(folder, out, warm_calls, compare_code))
    if report:
        times["report"] = timed_cli(["report", "--runs", str(folder), "--out", str(out / "report.html")])
    if skip_check:
        skip_s, pairs, found = skip_if_done(folder)
        assert found == n, f"skip-if-done found {found} of {n} records"
        times["skip-if-done"] = skip_s
    return times


def print_table(rows: list[tuple[int, dict[str, float]]]) -> None:
    """Seconds, ms per record, and the time per record over the smallest size's."""
    steps = [k for k in dict.fromkeys(k for _, t in rows for k in t) if k != "ratio"]
    base_n, base = rows[0]
    print("\n| records | " + " | ".join(f"{s} (s) | ms/record | ratio" for s in steps) + " |")
    print("|---:|" + "---:|---:|---:|" * len(steps))
    for n, t in rows:
        cells = []
        for s in steps:
            if s not in t:
                cells += ["", "", ""]
                continue
            per = 1000 * t[s] / n
            ratio = per / (1000 * base[s] / base_n) if s in base and base[s] else float("nan")
            cells += [f"{t[s]:.1f}", f"{per:.3f}", f"{ratio:.2f}"]
        print(f"| {n:,} | " + " | ".join(cells) + " |")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="10000,100000", help="record counts, comma-separated")
    ap.add_argument("--template", default=None, help="records to copy (default results/runs)")
    ap.add_argument("--keep", default=None, help="folder to keep the record folders in (default: a temp dir)")
    ap.add_argument("--report-max", type=int, default=10_000,
                    help="time `ssl-bench report` only up to this many records (it reads every record)")
    ap.add_argument("--skip-check-max", type=int, default=None,
                    help="time skip-if-done only up to this many records (default: every size)")
    ap.add_argument("--warm-calls", type=int, default=1, help="warm leaderboard calls to time (median and range)")
    ap.add_argument("--compare-code", default=None,
                    help="another checkout (e.g. main's) whose leaderboard is timed beside each warm call")
    args = ap.parse_args(argv)
    from harness.results.records import runs_dir

    templates = template_records(Path(args.template) if args.template else runs_dir())
    sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    root = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="records_bench_"))
    print(f"{len(templates)} template records; cpus {os.cpu_count()}; load {os.getloadavg()[0]:.1f}; "
          f"folders under {root}")
    rows = []
    for n in sizes:
        times = measure(templates, n, root, report=n <= args.report_max, warm_calls=args.warm_calls,
                        compare_code=Path(args.compare_code).resolve() if args.compare_code else None,
                        skip_check=args.skip_check_max is None or n <= args.skip_check_max)
        rows.append((n, times))
        print(f"{n:>7} records: " + " | ".join(f"{k} {v:.1f} s" for k, v in times.items())
              + f" | load {os.getloadavg()[0]:.1f}", flush=True)
    print_table(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
