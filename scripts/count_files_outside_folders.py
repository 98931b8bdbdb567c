"""Per protocol folder (``benchmarks/<folder>/``), the files outside it that belong to its
protocols alone: the evidence of how far the protocols are from living in their folders.

A protocol family is a folder of benchmarks/ with a declaration.py; its names are the folder's name
and its protocols' names (read from the declarations, torch-free). A file outside benchmarks/
names a family when a path component carries one of its names as a whole token (``test_knn.py``,
``configs/protocols/linear_dino.yaml``, ``tests/fixtures/davis/...``; the longest name wins, so
``seg_linear_paper.yaml`` is segmentation's, not classification's) or when its text names the
folder as a module or a path (``benchmarks.dense_nn``, ``benchmarks/normals/``; a link to the folder's
README.md is a reference to its documentation, not a claim on the file), and a paper table spec
(configs/paper/*.yaml) names the families of its protocols. A file that names exactly one family is
counted for it; files naming none or several are shared. The files are
git's tracked files, so the count is of what the repository holds; harness/ and methods/ are left
out (tests/test_layering.py keeps the protocols out of them).

    python -m scripts.count_files_outside_folders [--list FOLDER]

tests/test_protocol_folders.py reports, with the same rule, every such file of the families it keeps
(``strays``): everything but the "other" column belongs in the folder.
"""
from __future__ import annotations

import argparse
import re
import subprocess
from collections.abc import Iterable
from collections import Counter, defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PROTOCOLS_PACKAGE = "benchmarks"
# the core and the methods are kept apart from the protocols by tests/test_layering.py, not counted here
LIBRARY_PACKAGES = ("harness", "methods")
AREAS = ("tests", "fixtures", "configs", "docs", "scripts")  # the columns; every other place: "other"
TEXT_LIMIT = 1_000_000  # bytes of a file read for folder references (fixtures can be large arrays)
PAPER_SPECS = re.compile(r"^configs/paper/[^/]+\.ya?ml$")  # a table spec names its protocols as keys


def families(declarations: dict[str, str]) -> dict[str, set[str]]:
    """Folder -> its names (the folder's and its protocols'), from protocol name -> module."""
    out: dict[str, set[str]] = defaultdict(set)
    for name, module in declarations.items():
        parts = module.split(".")
        if parts[0] == PROTOCOLS_PACKAGE and len(parts) > 2:
            out[parts[1]] |= {parts[1], name}
    return dict(out)


def _name_pattern(names: dict[str, str]) -> re.Pattern:
    """One alternation of every name, longest first, each a whole token of a path component."""
    alternatives = "|".join(re.escape(n) for n in sorted(names, key=len, reverse=True))
    return re.compile(rf"(?<![A-Za-z0-9])({alternatives})(?![A-Za-z0-9])")


def families_named(path: str, text: str, fams: dict[str, set[str]]) -> set[str]:
    """The families a file names by its path's tokens or by a reference to their folder in its text."""
    owner = {name: folder for folder, names in fams.items() for name in names}
    found = {owner[m] for part in path.split("/") for m in _name_pattern(owner).findall(part)}
    folders = "|".join(re.escape(f) for f in sorted(fams, key=len, reverse=True))
    found |= set(re.findall(rf"{PROTOCOLS_PACKAGE}[./]({folders})(?![A-Za-z0-9_])(?!/README\.md)", text))
    if PAPER_SPECS.match(path):
        found |= {owner[p] for p in _spec_protocols(text) if p in owner}
    return found


def _spec_protocols(text: str) -> list[str]:
    """The protocols a paper table spec measures (its ``protocols:`` keys); none for a file that does not parse."""
    import yaml

    try:
        spec = yaml.safe_load(text)
    except yaml.YAMLError:
        return []
    protocols = spec.get("protocols") if isinstance(spec, dict) else None
    return list(protocols) if isinstance(protocols, dict) else []


def strays(listed: dict[str, list[str]], folders: Iterable[str], allowed: Iterable[str] = ()) -> dict[str, list[str]]:
    """Of the files ``count`` lists for each of ``folders``, those that belong in the folder: every area
    but "other" (tests, fixtures, configs, docs, scripts), less the ``allowed`` paths."""
    allowed = set(allowed)
    return {f: sorted(p for p in listed.get(f, []) if area_of(p) != "other" and p not in allowed)
            for f in folders}


def area_of(path: str) -> str:
    if path.startswith("tests/fixtures/"):
        return "fixtures"
    if path.startswith("tests/experiments/"):
        return "other"  # the tests of experiments/ go where the experiments go
    top = path.split("/")[0]
    return top if top in AREAS else "other"


def _read_text(path: Path) -> str:
    try:
        with path.open("rb") as f:
            return f.read(TEXT_LIMIT).decode("utf-8")
    except (UnicodeDecodeError, OSError):
        return ""  # a binary file: its path alone says whose it is


def count(files: list[str], fams: dict[str, set[str]], root: Path = REPO) -> tuple[dict, dict]:
    """(folder -> area -> files outside it that name it alone, folder -> files inside it)."""
    outside: dict[str, Counter] = {folder: Counter() for folder in fams}
    inside = Counter()
    listed: dict[str, list[str]] = defaultdict(list)
    for path in files:
        parts = path.split("/")
        if parts[0] == PROTOCOLS_PACKAGE:
            if len(parts) > 2 and parts[1] in fams:
                inside[parts[1]] += 1
            continue
        if parts[0] in LIBRARY_PACKAGES:
            continue
        named = families_named(path, _read_text(root / path), fams)
        if len(named) == 1:
            (folder,) = named
            outside[folder][area_of(path)] += 1
            listed[folder].append(path)
    return outside, {"inside": inside, "listed": listed}


def tracked_files(root: Path = REPO) -> list[str]:
    out = subprocess.run(["git", "ls-files"], cwd=root, check=True, capture_output=True, text=True).stdout
    return [line for line in out.splitlines() if line and (root / line).is_file()]


def table(outside: dict, inside: Counter, fams: dict[str, set[str]], protocols: dict[str, list[str]]) -> str:
    columns = (*AREAS, "other")
    head = f"| folder | protocols | {' | '.join(columns)} | outside | inside |"
    rows = [head, "|" + "---|" * (len(columns) + 4)]
    order = sorted(fams, key=lambda f: (-sum(outside[f].values()), f))
    for folder in order:
        cells = " | ".join(str(outside[folder][c]) for c in columns)
        names = ", ".join(sorted(protocols[folder]))
        rows.append(f"| {folder} | {names} | {cells} | {sum(outside[folder].values())} | {inside[folder]} |")
    total_out = sum(sum(c.values()) for c in outside.values())
    rows.append(f"| all | | {' | '.join(str(sum(outside[f][c] for f in fams)) for c in columns)} | "
                f"{total_out} | {sum(inside.values())} |")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--list", metavar="FOLDER", help="also list the files counted for this folder")
    parser.add_argument("--root", type=Path, default=REPO, help="a checkout to count (default: this one)")
    args = parser.parse_args(argv)
    from harness.registry import protocol_declarations  # torch-free: the declarations only

    modules = {name: d.module for name, d in protocol_declarations().items()}
    fams = families(modules)
    protocols = {folder: [n for n, m in modules.items() if m.split(".")[1:2] == [folder]] for folder in fams}
    outside, extra = count(tracked_files(args.root), fams, args.root)
    print(table(outside, extra["inside"], fams, protocols))
    if args.list:
        print("\n".join(sorted(extra["listed"].get(args.list, []))))


if __name__ == "__main__":
    main()
