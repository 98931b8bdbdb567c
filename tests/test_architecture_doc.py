"""docs/ARCHITECTURE.md's layout names every module of the core and the protocols, and every
module it names under harness/ exists: the map follows the code."""
import re
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DOC = REPO / "docs" / "ARCHITECTURE.md"


def _layout_block() -> str:
    text = DOC.read_text()
    start = text.index("```\nrun_benchmark.py")
    return text[start:text.index("```\n", start + 4)]


def _code_modules(package: str) -> list[Path]:
    return sorted(p.relative_to(REPO / package) for p in (REPO / package).rglob("*.py")
                  if p.name != "__init__.py" and "__pycache__" not in p.parts and "_shipped" not in p.parts)


def _protocol_folders() -> set[str]:
    """benchmarks/ folders that declare protocols: each documents itself (its README.md), so a new
    protocol needs no line in the architecture map."""
    return {p.parent.name for p in (REPO / "benchmarks").glob("*/declaration.py")}


def test_layout_names_every_module_and_folder():
    block = _layout_block()
    named = set(re.findall(r"[\w]+\.py", block))
    protocol_folders = _protocol_folders()
    missing = [f"{pkg}/{m}" for pkg in ("harness", "benchmarks", "methods")
               for m in _code_modules(pkg) if m.name not in named
               and not (pkg == "benchmarks" and m.parts[0] in protocol_folders)]
    folders = {f"{pkg}/{m.parent}" for pkg in ("harness", "benchmarks") for m in _code_modules(pkg)
               if m.parent != Path(".") and not (pkg == "benchmarks" and m.parts[0] in protocol_folders)}
    missing += [f for f in sorted(folders) if not re.search(rf"^\s+{Path(f).name}/", block, re.M)]
    assert not missing, f"docs/ARCHITECTURE.md's layout does not name: {missing}"


def test_every_protocol_folder_is_documented():
    undocumented = [f for f in sorted(_protocol_folders()) if not (REPO / "benchmarks" / f / "README.md").is_file()]
    assert not undocumented, f"protocol folders without a README.md: {undocumented}"


def test_every_harness_path_the_doc_names_exists():
    paths = set(re.findall(r"`(harness/[\w/]+\.py)`", DOC.read_text()))
    stale = sorted(p for p in paths if not (REPO / p).is_file())
    assert paths and not stale, f"docs/ARCHITECTURE.md names modules that do not exist: {stale}"


def test_the_counts_and_lists_the_doc_states_are_the_codes():
    """The importer layouts it counts and the modules that add their own subcommands."""
    from harness.models.importers import LAYOUTS

    block = _layout_block()
    assert re.search(rf"\b{len(LAYOUTS)} layouts\)", block), f"the importers hold {len(LAYOUTS)} layouts"
    cli_entry = block[block.index("  cli.py "):block.index("`add_cli(subparsers)`")]
    with_cli = sorted(str(p.relative_to(REPO / "harness").with_suffix("")) for p in (REPO / "harness").rglob("*.py")
                      if "def add_cli(" in p.read_text())
    from harness.cli import SUBCOMMAND_MODULES
    for module in with_cli:
        assert module in cli_entry, f"docs/ARCHITECTURE.md's cli.py entry does not name {module}"
        assert f"harness.{module.replace('/', '.')}" in SUBCOMMAND_MODULES, (
            f"harness/cli.py does not add {module}'s commands")
