"""Subcommands that belong to other modules (kept here so the core CLI stays small)."""
from __future__ import annotations

from pathlib import Path

from harness.cli import extra_command


@extra_command
def _new_method(sub) -> None:
    p = sub.add_parser("new-method", help="scaffold a method module, its CPU config and a conformance test")
    p.add_argument("name")
    p.add_argument("--root", default=None, help="project root to write into (default: this checkout)")
    p.add_argument("--force", action="store_true")

    def run(args) -> int:
        from harness.scaffold import new_method

        for path in new_method(args.name, Path(args.root) if args.root else None, args.force):
            print(f"wrote {path}")
        print(f"next: register it by importing methods.{args.name} (add it to methods/__init__.py, or "
              f"expose it through the 'ssl_bench.methods' entry-point group in a plugin package), "
              f"then run: python -m pytest tests/test_method_{args.name}.py")
        return 0

    p.set_defaults(func=run)


@extra_command
def _zoo_and_paper(sub) -> None:
    from harness import paper, zoo

    zoo.add_cli(sub)
    paper.add_cli(sub)


@extra_command
def _report_and_compare(sub) -> None:
    from harness import compare, report

    report.add_cli(sub)
    compare.add_cli(sub)
