"""`ssl-bench new-method NAME`: a method module, its CPU config and a conformance test.

The generated method is a small, working cross-view self-distillation (DINO's loss on
two global crops, built from the shared head, centring and multi-crop pieces), so the
new test passes from the first minute; replace `training_step` with the new idea.
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
    root = root or source_checkout()
    if root is None:  # an installed package: never write into site-packages
        raise ConfigError("ssl-bench is installed as a package, not run from a checkout: pass --root, "
                          "the project folder to write the method, its config and its test into")
    root = Path(root)
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


def add_cli(subparsers) -> None:
    """Adds `new-method NAME` to an argparse subparsers object."""
    p = subparsers.add_parser("new-method", help="scaffold a method module, its CPU config and a conformance test")
    p.add_argument("name")
    p.add_argument("--root", default=None, help="project root to write into (default: this checkout)")
    p.add_argument("--force", action="store_true")
    p.set_defaults(func=cmd_new_method)


def cmd_new_method(args) -> int:
    for path in new_method(args.name, Path(args.root) if args.root else None, args.force):
        print(f"wrote {path}")
    print(f"next: register it by adding methods.{args.name} to methods/__init__.py (or expose it "
          f"through the 'ssl_bench.methods' entry-point group in a plugin package), "
          f"then run: python -m pytest tests/test_method_{args.name}.py")
    return 0
