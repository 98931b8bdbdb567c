"""`ssl-bench new-method NAME` and `ssl-bench new-protocol NAME`: working, tested skeletons.

The generated method is a small, working cross-view self-distillation (DINO's loss on
two global crops, built from the shared head, centring and multi-crop pieces), so the
new test passes from the first minute; replace `training_step` with the new idea.

The generated protocol is one folder, benchmarks/NAME/ (declaration, protocol, presets, README,
tests): a ridge regression of a per-image target on frozen features with a lower-is-better RMSE,
which runs on SynthScenes and shows in every table from the first minute. Outside its folder it
touches one file: pyproject.toml, whose package list gains ``benchmarks.NAME``.
"""
from __future__ import annotations

import keyword
import re
from pathlib import Path

from harness.errors import ConfigError
from harness.paths import source_checkout

# The generated files, as str.format templates ({name}, {cls}, {title}, {module}).
TEMPLATES = Path(__file__).parent / "templates"


def _template(name: str) -> str:
    return (TEMPLATES / name).read_text()


def _class_name(name: str) -> str:
    return "".join(part.capitalize() for part in name.split("_"))


def new_method(name: str, root: Path | None = None, force: bool = False) -> list[Path]:
    if not re.fullmatch(r"[a-z][a-z0-9_]*", name) or keyword.iskeyword(name):
        raise ConfigError(f"method name {name!r} must be a lower-case Python identifier (e.g. my_method)")
    from harness.registry import METHODS

    if name in METHODS:
        raise ConfigError(f"a method named {name!r} is already registered; choose another name")
    root = _checked_root(root, "the method, its config and its test")
    fields = dict(name=name, cls=_class_name(name), title=_class_name(name), module=f"methods.{name}")
    files = {
        root / "methods" / f"{name}.py": _template("method.py.txt").format(**fields),
        root / "configs" / "methods" / f"{name}_cpu.yaml": _template("method_config.yaml.txt").format(**fields),
        root / "tests" / f"test_method_{name}.py": _template("method_test.py.txt").format(**fields),
    }
    existing = [str(p) for p in files if p.exists()]
    if existing and not force:
        raise ConfigError(f"would overwrite {existing}; pass --force to replace them")
    for path, text in files.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return list(files)


def _checked_root(root: Path | None, what: str) -> Path:
    root = root or source_checkout()
    if root is None:  # an installed package: never write into site-packages
        raise ConfigError(f"ssl-bench is installed as a package, not run from a checkout: pass --root, "
                          f"the project folder to write {what} into")
    return Path(root)


def protocol_files(name: str, root: Path) -> dict[Path, str]:
    """The files of a new protocol folder, by path, with their text."""
    package = f"benchmarks.{name}"
    fields = dict(name=name, cls=_class_name(name), title=_class_name(name).replace("_", " "), package=package,
                  package_path=f"benchmarks/{name}")
    folder = root / "benchmarks" / name
    return {
        folder / "__init__.py": _template("protocol_init.py.txt").format(**fields),
        folder / "declaration.py": _template("protocol_declaration.py.txt").format(**fields),
        folder / "protocol.py": _template("protocol.py.txt").format(**fields),
        folder / "presets" / f"{name}_synth.yaml": _template("protocol_preset.yaml.txt").format(**fields),
        folder / "README.md": _template("protocol_readme.md.txt").format(**fields),
        folder / "tests" / f"test_{name}.py": _template("protocol_test.py.txt").format(**fields),
    }


def add_package(pyproject: Path, package: str) -> bool:
    """List ``package`` in pyproject.toml's setuptools packages (after the last benchmarks one);
    False when it is listed already."""
    text = pyproject.read_text()
    match = re.search(r"^packages = \[(.*?)\]", text, re.S | re.M)
    if match is None:
        raise ConfigError(f"{pyproject}: no `packages = [...]` list under [tool.setuptools] to add {package!r} to")
    listed = re.findall(r'"([^"]+)"', match.group(1))
    if package in listed:
        return False
    last = max((m for m in re.finditer(r'"benchmarks[^"]*"', match.group(1))), key=lambda m: m.end(), default=None)
    at = match.start(1) + (last.end() if last else len(match.group(1)))
    pyproject.write_text(text[:at] + f', "{package}"' + text[at:])
    return True


def new_protocol(name: str, root: Path | None = None, force: bool = False) -> list[Path]:
    """Write benchmarks/NAME/ and list its package in pyproject.toml; the paths written."""
    if not re.fullmatch(r"[a-z][a-z0-9_]*", name) or keyword.iskeyword(name):
        raise ConfigError(f"protocol name {name!r} must be a lower-case Python identifier (e.g. depth_probe)")
    from harness.registry import PROTOCOLS

    if PROTOCOLS.known(name) or name in PROTOCOLS:
        raise ConfigError(f"a protocol named {name!r} is already registered; choose another name")
    root = _checked_root(root, "the protocol folder")
    if (root / "benchmarks" / name).exists() and not force:
        raise ConfigError(f"{root / 'benchmarks' / name} exists; choose another name or pass --force to replace it")
    files = protocol_files(name, root)
    for path, text in files.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    written = list(files)
    if add_package(root / "pyproject.toml", f"benchmarks.{name}"):
        written.append(root / "pyproject.toml")
    return written


def add_cli(subparsers) -> None:
    """Adds `new-method NAME` and `new-protocol NAME` to an argparse subparsers object."""
    p = subparsers.add_parser("new-method", help="scaffold a method module, its CPU config and a conformance test")
    p.add_argument("name")
    p.add_argument("--root", default=None, help="project root to write into (default: this checkout)")
    p.add_argument("--force", action="store_true")
    p.set_defaults(func=cmd_new_method)
    q = subparsers.add_parser("new-protocol", help="scaffold a protocol folder (benchmarks/NAME): declaration, "
                                                   "protocol, presets, README and a test")
    q.add_argument("name")
    q.add_argument("--root", default=None, help="project root to write into (default: this checkout)")
    q.add_argument("--force", action="store_true")
    q.set_defaults(func=cmd_new_protocol)


def cmd_new_protocol(args) -> int:
    for path in new_protocol(args.name, Path(args.root) if args.root else None, args.force):
        print(f"wrote {path}")
    print(f"next: pip install -e . (the package list changed), then python -m pytest benchmarks/{args.name}; "
          f"docs/ADDING_A_PROTOCOL.md walks through turning the example into the new protocol")
    return 0


def cmd_new_method(args) -> int:
    for path in new_method(args.name, Path(args.root) if args.root else None, args.force):
        print(f"wrote {path}")
    print(f"next: register it by adding methods.{args.name} to methods/__init__.py (or expose it "
          f"through the 'ssl_bench.methods' entry-point group in a plugin package), "
          f"then run: python -m pytest tests/test_method_{args.name}.py")
    return 0
