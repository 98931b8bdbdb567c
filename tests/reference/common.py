"""What every fixture generator shares: its command line, the official checkout it imports,
a one-process gloo group, the provenance block and the JSON writer.

A generator is a script, not library code (``python tests/reference/gen_X.py``): it puts the
official checkout (a path given on its command line, never a copy inside this repository) on the
import path with ``on_import_path`` and runs the official code unmodified. Only numbers are
committed; the provenance block says which repository and commit, every setting, which script
and which environment produced them.
"""
from __future__ import annotations

import argparse
import datetime
import hashlib
import importlib
import json
import platform
import re
import subprocess
import sys
import tempfile
import types
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures"
COMMIT_RE = re.compile(r"^[0-9a-f]{40}$")


def on_import_path(path: Path) -> None:
    """Put ``path`` first on ``sys.path``: the one sanctioned change of the import path outside
    tests/conftest.py (docs/ARCHITECTURE.md), for reference generation only. It makes an official
    checkout (code kept outside this repository) importable, and this repository's root and
    tests/ for a generator run as a script. (``python -m tests.reference.gen_X`` is not an
    option: mmsegmentation installs a top-level ``tests`` package that shadows tests/, and a
    tests/__init__.py would rename the test modules, which import each other by their own names.)"""
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))


# The harness, and the seeded inputs the tests and the generators share (tests/test_*.py).
for _p in (ROOT, ROOT / "tests"):
    on_import_path(_p)


def parse_args(doc: str, fixture: str | Path, repository: str, commit: str, threads: int = 2, *,
               positional: bool = False, extra=None, argv: list[str] | None = None,
               fixtures: Path = FIXTURES) -> argparse.Namespace:
    """``--official PATH`` (a checkout of ``repository``), ``--out`` (default: the committed
    fixture: ``fixture`` in tests/fixtures, or a path in a protocol folder's fixtures/), ``--commit``
    (only needed when the checkout is not a git work tree).
    ``commit`` is the one the committed fixture was made from, shown in the help. ``threads``:
    the default torch thread count, 2 (the committed numbers were made on a 2-core machine with
    torch's default; BatchNorm statistics in a head move in the last digit with another count).
    ``positional``: the checkout may also be given as the first argument (the end-to-end
    generators' command line); ``extra(parser)`` adds a generator's own options. ``fixtures``: the
    folder of the committed fixture (a protocol folder's ``fixtures/``; default tests/fixtures)."""
    parser = argparse.ArgumentParser(description=doc.strip().splitlines()[0],
                                     epilog=f"Official code: {repository} at commit {commit}.")
    if positional:
        parser.add_argument("official_path", nargs="?", type=Path, metavar="OFFICIAL",
                            help=f"a checkout of {repository} (commit {commit}); or --official")
        parser.add_argument("--official", type=Path, default=None, help="the same, as an option")
    else:
        parser.add_argument("--official", required=True, type=Path,
                            help=f"a checkout of {repository} (commit {commit})")
    parser.add_argument("--out", type=Path, default=fixtures / fixture,
                        help=f"where to write the fixture (default: {_shown(fixtures / fixture)})")
    parser.add_argument("--commit", default=None,
                        help="the checkout's full 40-character commit, if it is not a git work tree "
                             "(read with `git rev-parse HEAD` otherwise)")
    parser.add_argument("--threads", type=int, default=threads,
                        help=f"torch CPU threads (default {threads}; a fixed number keeps the reductions in one "
                             "order on any machine; the number used is recorded)")
    if extra is not None:
        extra(parser)
    args = parser.parse_args(argv)
    if positional:
        given = [p for p in (args.official_path, args.official) if p is not None]
        if not given:
            parser.error(f"the checkout of {repository} is required (first argument or --official)")
        if len(given) == 2 and given[0].resolve() != given[1].resolve():
            parser.error("the checkout given twice (first argument and --official), differently")
        args.official = given[0]
        del args.official_path
    import torch

    torch.set_num_threads(args.threads)
    args.official = args.official.resolve()
    if not args.official.is_dir():
        parser.error(f"--official {args.official}: not a directory; expected a checkout of {repository}")
    if args.official.is_relative_to(ROOT):
        parser.error(f"--official {args.official} is inside this repository: check the official code out "
                     "elsewhere (only the numbers are committed, never the official code)")
    args.commit, args.git_checkout = official_commit(args.official, args.commit, parser)
    args.repository = repository
    args.fixture = fixtures / fixture
    return args


def _shown(path: Path) -> str:
    return path.relative_to(ROOT).as_posix() if path.is_relative_to(ROOT) else str(path)


def load_folder_generator_helpers(generator: str) -> None:
    """For a generator kept in a protocol folder (``benchmarks/<folder>/reference/gen_X.py``): its
    folder's tests/ on the import path, for the seeded inputs its tests and it share."""
    on_import_path(Path(generator).resolve().parents[1] / "tests")


def official_commit(path: Path, given: str | None, parser: argparse.ArgumentParser) -> tuple[str, bool]:
    """The checkout's commit and whether it is a git work tree: ``git rev-parse HEAD`` when
    ``path`` is the top of a git work tree, else ``--commit``; both given and different is an error."""
    found = None
    try:
        top = subprocess.run(["git", "-C", str(path), "rev-parse", "--show-toplevel"], capture_output=True,
                             text=True, check=True).stdout.strip()
        if Path(top).resolve() == path:  # not an enclosing repository (e.g. this one)
            found = subprocess.run(["git", "-C", str(path), "rev-parse", "HEAD"], capture_output=True,
                                   text=True, check=True).stdout.strip()
    except (subprocess.CalledProcessError, FileNotFoundError):
        pass
    if given is not None:
        given = given.strip().lower()
        if not COMMIT_RE.match(given):
            parser.error(f"--commit {given!r}: expected the full 40-character hexadecimal commit")
        if found and found != given:
            parser.error(f"--commit {given} but the checkout {path} is at {found}")
        return given, bool(found)
    if not found:
        parser.error(f"{path} is not a git work tree: pass its commit with --commit (40 hex characters)")
    return found, True


def git_blob_sha1(path: Path) -> str:
    """The file's git blob id (what `git hash-object` prints), so a plain checkout can be
    checked against the commit's tree (`git ls-tree -r COMMIT`)."""
    data = path.read_bytes()
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def import_official(path: Path, module: str, stubs: dict[str, dict] | None = None):
    """Import ``module`` from the checkout at ``path``. ``stubs``: module name -> attributes of a
    stand-in for an import the code under test never uses (each generator says why)."""
    for name, attrs in (stubs or {}).items():
        stub = types.ModuleType(name)
        stub.__dict__.update(attrs)
        sys.modules[name] = stub
    on_import_path(path)
    mod = importlib.import_module(module)
    if not Path(mod.__file__).resolve().is_relative_to(path):
        raise RuntimeError(f"{module} was imported from {mod.__file__}, not from the checkout {path}")
    return mod


def loaded_official_files(path: Path) -> list[str]:
    """The checkout's files imported so far (paths relative to it, sorted): what ran."""
    files = set()
    for mod in list(sys.modules.values()):
        f = getattr(mod, "__file__", None)
        if f and Path(f).resolve().is_relative_to(path):
            files.add(Path(f).resolve().relative_to(path).as_posix())
    return sorted(files)


def init_gloo() -> None:
    """A one-process gloo group, for official code that all-reduces (world size 1)."""
    import torch.distributed as dist

    if dist.is_initialized():
        return
    rdv = Path(tempfile.mkdtemp(prefix="ssl-bench-gen-")) / "rdv"
    dist.init_process_group("gloo", init_method=f"file://{rdv}", rank=0, world_size=1)


def environment(extra_modules: tuple[str, ...] = ()) -> dict:
    import numpy
    import torch

    env = {"python": platform.python_version(), "torch": torch.__version__, "numpy": numpy.__version__,
           "platform": platform.platform(), "machine": platform.machine(), "torch_threads": torch.get_num_threads(),
           "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}
    for name in extra_modules:
        mod = sys.modules.get(name) or importlib.import_module(name)
        env[name] = getattr(mod, "__version__", "unknown")
    return env


def provenance(args: argparse.Namespace, generator: str, hyperparameters: dict, official_files: list[str],
               extra_modules: tuple[str, ...] = (), notes: str | None = None) -> dict:
    """The block every fixture carries: where the numbers come from and how to make them again."""
    gen = Path(generator).resolve().relative_to(ROOT).as_posix()
    blobs = {f: git_blob_sha1(args.official / f) for f in official_files}
    if args.git_checkout:  # the files run must be the commit's, unmodified
        for f, blob in blobs.items():
            want = subprocess.run(["git", "-C", str(args.official), "rev-parse", f"HEAD:{f}"], capture_output=True,
                                  text=True).stdout.strip()
            if blob != want:
                raise SystemExit(f"{args.official / f} differs from its version at {args.commit} "
                                 f"(blob {blob}, expected {want or 'none'}): run the official code unmodified")
    block = {
        "repository": args.repository,
        "commit": args.commit,
        "generator": gen,
        "command": f"python {gen} --official <checkout of {args.repository} at {args.commit}>",
        "official_files": blobs,
        "checkout": ("git work tree; the official files checked against the commit" if args.git_checkout
                     else "plain folder; commit given with --commit (check official_files with git ls-tree)"),
        "hyperparameters": hyperparameters,
        "environment": environment(extra_modules),
    }
    if notes:
        block["notes"] = notes
    return block


def write_fixture(path: Path, data: dict) -> None:
    """JSON, one-space indent (the committed fixtures' format), ``provenance`` first."""
    if "provenance" not in data:
        raise ValueError("a fixture without a provenance block")
    ordered = {"provenance": data["provenance"], **{k: v for k, v in data.items() if k != "provenance"}}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(ordered, indent=1) + "\n")
    print(f"wrote {path}")


def numeric_diff(a, b, path: str = "", mismatches: list | None = None) -> tuple[float, str]:
    """Largest |a - b| over the numbers two JSON trees share; other differences (strings, keys,
    lengths, types) are appended to ``mismatches``."""
    mismatches = [] if mismatches is None else mismatches
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool) \
            and not isinstance(b, bool):
        return abs(a - b), path
    if isinstance(a, dict) and isinstance(b, dict):
        if set(a) != set(b):
            mismatches.append(f"{path}: keys {sorted(set(a) ^ set(b))}")
        parts = [numeric_diff(a[k], b[k], f"{path}.{k}", mismatches) for k in a if k in b]
    elif isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            mismatches.append(f"{path}: length {len(a)} != {len(b)}")
        parts = [numeric_diff(x, y, f"{path}[{i}]", mismatches) for i, (x, y) in enumerate(zip(a, b))]
    else:
        if a != b:
            mismatches.append(f"{path}: {a!r:.60} != {b!r:.60}")
        return 0.0, path
    return max(parts, key=lambda p: p[0], default=(0.0, path))


def compare_with_committed(new: dict, committed_path: Path, skip: tuple[str, ...] = ("provenance", "how"),
                           unpack=None) -> None:
    """Print the largest difference between the new numbers and the committed fixture's.
    ``unpack``: applied to both trees first (e.g. to decode packed arrays into numbers)."""
    if not committed_path.is_file():
        print(f"no committed fixture at {committed_path} to compare with")
        return
    old = json.loads(committed_path.read_text())
    new = json.loads(json.dumps(new))  # what will be written (tuples as lists, keys as strings)
    if unpack is not None:
        new, old = unpack(new), unpack(old)
    mismatches: list[str] = []
    diff, where = numeric_diff({k: v for k, v in new.items() if k not in skip},
                               {k: v for k, v in old.items() if k not in skip}, "", mismatches)
    print(f"compared with {committed_path}: max abs diff {diff:.6g}" + (f" (at {where})" if diff else ""))
    for m in mismatches:
        print(f"  differs: {m}")


def finish(args: argparse.Namespace, data: dict, skip: tuple[str, ...] = ("provenance", "how"),
           unpack=None) -> None:
    """Compare with the committed fixture (before overwriting it), then write ``--out``.
    ``skip``: top-level keys not compared (provenance, descriptions, timings)."""
    compare_with_committed(data, args.fixture, skip, unpack)
    write_fixture(args.out, data)


def git_head(path: Path) -> tuple[str, bool]:
    """(commit, dirty) of the git work tree at ``path`` (tracked files only)."""
    head = subprocess.run(["git", "-C", str(path), "rev-parse", "HEAD"], capture_output=True, text=True,
                          check=True).stdout.strip()
    dirty = bool(subprocess.run(["git", "-C", str(path), "status", "--porcelain", "--untracked-files=no"],
                                capture_output=True, text=True, check=True).stdout.strip())
    return head, dirty


class FaissCPUSearch:
    """Stand-in for open-hummingbird-eval's GPU-only NearestNeighborSearchFaiss (hbird/nn/
    search_faiss.py): the same exact inner-product search with faiss-cpu's IndexFlatIP."""

    def __init__(self, feature_memory, n_neighbors=30, distance_measure="dot_product", **kwargs):
        import faiss

        assert distance_measure == "dot_product"
        self.n_neighbors = n_neighbors
        self.index = faiss.IndexFlatIP(feature_memory.size(1))
        self.index.add(feature_memory.cpu().numpy())

    def find_nearest_neighbors(self, q, k=None):
        distances, indices = self.index.search(q.cpu().numpy(), k or self.n_neighbors)
        return indices, distances


def require_pinned_commit(args: argparse.Namespace, commit: str, label: str = "") -> None:
    """Stop unless the checkout is the unmodified pinned commit (``--allow-other-commit`` overrides)."""
    dirty = args.git_checkout and git_head(args.official)[1]
    if (args.commit != commit or dirty) and not args.allow_other_commit:
        sys.exit(f"{args.official} is at {args.commit}{' (modified)' if dirty else ''}; expected the unmodified "
                 f"{commit}{label}; pass --allow-other-commit to use it anyway")
