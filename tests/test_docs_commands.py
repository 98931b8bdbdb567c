"""The `ssl-bench ...` commands of the protocol pages (each protocol folder's
README.md): each parses and names a
registered protocol, one of its presets and a known data set (fast); the evaluations on SynthScenes
tiny run as written, each on the set the page's own `ssl-bench data synth` line makes (slow)."""
from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from harness.cli import build_parser, command_of, main, parse_command_line

REPO = Path(__file__).resolve().parents[1]
PAGES = sorted((REPO / "benchmarks").glob("*/README.md"))
FENCE = re.compile(r"```[a-z]*\n(.*?)```", re.S)
OPTIONAL = re.compile(r"\[--[^\]]*\]")  # `[--set a=b]`: an optional part, left out
# The mmseg protocols train for minutes even on SynthScenes tiny: their commands are parsed only.
NOT_RUN = {"seg_linear", "segmenter"}


def page_commands(page: Path) -> list[list[str]]:
    """Each fenced block's `ssl-bench` commands (continuation lines joined, comments and optional
    parts removed, `...` dropped), as argv lists without the program name."""
    commands = []
    for block in FENCE.findall(page.read_text()):
        for line in block.replace("\\\n", " ").splitlines():
            words = shlex.split(OPTIONAL.sub("", line), comments=True)
            if words[:1] == ["ssl-bench"]:
                commands.append([w for w in words[1:] if w != "..."])
    return commands


def _option(argv: list[str], name: str) -> str | None:
    return argv[argv.index(name) + 1] if name in argv else None


def _known_dataset(name: str) -> bool:
    from harness.data.catalogue import resolve
    from harness.errors import ConfigError

    try:
        resolve(name)
        return True
    except ConfigError:
        from harness.data.mmseg_layouts import ALIASES  # the names the mmseg protocols accept too

        return name in ALIASES


def _label(page: Path) -> str:
    return page.relative_to(REPO).as_posix()


def test_pages_hold_commands():
    counted = {_label(page): len(page_commands(page)) for page in PAGES}
    assert sum(counted.values()) > 40 and counted["benchmarks/depth/README.md"] >= 5


@pytest.mark.parametrize("page", PAGES, ids=_label)
def test_every_command_parses_and_names_what_exists(page):
    from harness.data.cli import synthetic_protocols
    from harness.registry import PROTOCOLS

    for argv in page_commands(page):
        try:
            args = parse_command_line(build_parser(command_of(argv)), argv)
        except SystemExit:
            pytest.fail(f"{page.name}: `ssl-bench {' '.join(argv)}` does not parse")
        protocol = getattr(args, "protocol", None)
        if args.command in ("eval", "show"):
            cls = PROTOCOLS.get(protocol)
            assert args.preset is None or args.preset in cls.PRESETS, (page.name, argv)
            assert _known_dataset(args.dataset), (page.name, argv)
        if args.command == "data" and args.data_command == "synth" and args.for_protocol:
            assert args.for_protocol in synthetic_protocols(), (page.name, argv)


def _under(path: str | None, roots: set) -> str | None:
    """The made root that ``path`` is or lies in (``SYNTH/imagenet`` in ``SYNTH``)."""
    return next((r for r in roots if path is not None and (path == r or path.startswith(r + "/"))), None)


def runnable(page: Path) -> list[list[str]]:
    """The page's `data synth --preset tiny` commands and the evaluations on the roots they make, with
    a random model (no checkpoint, no download). `show` repeats its evaluation: parsed only."""
    made, chosen = set(), []
    for argv in page_commands(page):
        if argv[:2] == ["data", "synth"] and _option(argv, "--preset") == "tiny":
            made.add(_option(argv, "--out"))
            chosen.append(argv)
        elif argv[0] == "eval" and "--random-init" in argv and _under(_option(argv, "--data-root"), made):
            protocol = _option(argv, "--protocol") or argv[1]
            if protocol not in NOT_RUN:
                chosen.append(argv)
    return chosen


RUN_PAGES = [p for p in PAGES if any(a[0] != "data" for a in runnable(p))]


@pytest.mark.slow
@pytest.mark.parametrize("page", RUN_PAGES, ids=_label)
def test_synthscenes_commands_run_as_written(page, isolated_home, one_torch_thread):
    roots: dict[str, str] = {}
    for argv in runnable(page):
        if argv[0] == "data":
            out = _option(argv, "--out")
            roots[out] = str(isolated_home / "roots" / re.sub(r"\W", "_", out))
        real = []
        for word in argv:
            root = _under(word, set(roots))
            real.append(roots[root] + word[len(root):] if root else word)
        assert main(real) == 0, f"{page.name}: `ssl-bench {' '.join(argv)}` failed"
