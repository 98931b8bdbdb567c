"""The model zoo: every published DINO / iBOT / CrIBo / SynCLR / DINOv2 / MAE / CrOC / TimeT /
Leopart / NeCo checkpoint as data (configs/zoo.yaml), listed with its official URL and
imported into the harness format; and the checkpoints ssl-bench trained itself and ships
beside their zoo file (configs/zoo/*.yaml, layout ``harness``).

Nothing is downloaded here: the user downloads the file from the URL shown by
``zoo_list`` and ``zoo_import`` converts it (checking its sha256 when the zoo knows it). A
shipped checkpoint is verified against its entry's size and sha256 on every use.
"""
from __future__ import annotations

import difflib
import re
import shlex
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

from harness.models.archs import ARCHS
from harness.config import CONFIG_ROOT, from_dict
from harness.errors import CheckpointError, ConfigError
from harness.models.importers import LAYOUTS, import_checkpoint
from harness.io_utils import sha256_file
from harness.paths import default_zoo_dir
from harness.yaml_io import load_yaml

ZOO_FILE = CONFIG_ROOT / "zoo.yaml"
SHIPPED_ZOO_DIR = CONFIG_ROOT / "zoo"  # zoo files of checkpoints that ship with ssl-bench
# The layout of a harness-format checkpoint shipped beside its zoo file: `file` is relative to
# that file's folder, `url` is empty, `sha256` and `size` are required.
SHIPPED_LAYOUT = "harness"


@dataclass
class ZooEntry:
    name: str
    method: str
    arch: str
    patch_size: int
    pretrain_data: str
    layout: str
    file: str
    url: str
    epochs: int | None = None
    sha256: str | None = None
    which: str = "teacher"  # full checkpoints: the branch the release's backbone is
    claims: dict[str, float] = field(default_factory=dict)
    source: str = ""
    size: int | None = None  # bytes; required for shipped checkpoints
    # how a shipped checkpoint was made: command, config, data, code, machine, wall time, log
    provenance: dict[str, Any] = field(default_factory=dict)
    # the folder of the zoo file that lists the entry (set when loading, never from YAML)
    home: Path | None = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self):
        if self.layout == SHIPPED_LAYOUT:
            self._check_shipped()
        elif self.layout not in LAYOUTS:
            raise ValueError(f"{self.name}: unknown layout {self.layout!r}; known: "
                             f"{', '.join([SHIPPED_LAYOUT, *LAYOUTS])}")
        if self.arch not in ARCHS:
            raise ValueError(f"{self.name}: unknown arch {self.arch!r}; known: {', '.join(sorted(ARCHS))}")
        if ARCHS[self.arch]["patch_size"] != self.patch_size:
            raise ValueError(f"{self.name}: patch_size {self.patch_size} but {self.arch} has "
                             f"{ARCHS[self.arch]['patch_size']}")
        if self.which not in ("teacher", "student"):
            raise ValueError(f"{self.name}: which must be teacher or student, found {self.which!r}")

    def _check_shipped(self) -> None:
        problems = []
        if not self.sha256 or len(self.sha256) != 64:
            problems.append(f"sha256 {self.sha256!r} (64 hex digits needed)")
        if not isinstance(self.size, int) or self.size <= 0:
            problems.append(f"size {self.size!r} (bytes needed)")
        if self.url:
            problems.append(f"url {self.url!r} (a shipped file has none)")
        if Path(self.file).is_absolute() or ".." in Path(self.file).parts:
            problems.append(f"file {self.file!r} (a path inside the zoo file's folder needed)")
        if problems:
            raise ValueError(f"{self.name}: a shipped ({SHIPPED_LAYOUT!r} layout) checkpoint has "
                             f"{'; '.join(problems)}")

    @property
    def shipped(self) -> bool:
        return self.layout == SHIPPED_LAYOUT

    def shipped_path(self) -> Path:
        """Where a shipped checkpoint's .safetensors lies."""
        return (self.home or SHIPPED_ZOO_DIR) / self.file

    @property
    def needs_trust(self) -> bool:
        """Full training checkpoints hold an argparse.Namespace: importing them needs trust."""
        return self.layout in ("dino_full", "ibot_full", "cribo_full", "croc_full")

    @property
    def url_dir(self) -> str:
        """The last folder of the URL (iBOT's files share a name and differ by folder)."""
        parts = self.url.split("?")[0].rstrip("/").split("/")
        return parts[-2] if len(parts) > 1 else ""


@lru_cache(maxsize=4)
def _load(path: str) -> dict[str, ZooEntry]:
    p = Path(path)
    try:
        data = load_yaml(p.read_text()) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise ConfigError(f"cannot read the zoo file {p}: {exc}") from exc
    entries: dict[str, ZooEntry] = {}
    for i, raw in enumerate(data.get("checkpoints") or []):
        entry = from_dict(ZooEntry, raw, str(p), f"checkpoints[{i}]")
        if entry.name in entries:
            raise ConfigError(f"{p}: zoo name {entry.name!r} appears twice")
        entry.home = p.parent
        entries[entry.name] = entry
    return entries


def zoo_files() -> list[Path]:
    """The zoo files read by default: the published checkpoints, then the shipped ones."""
    return [ZOO_FILE, *sorted(SHIPPED_ZOO_DIR.glob("*.yaml"))]


def load_zoo(path: str | Path | None = None) -> dict[str, ZooEntry]:
    """Entries of one zoo file, or of every default zoo file (a name may appear only once)."""
    if path is not None:
        return dict(_load(str(Path(path).resolve())))
    merged: dict[str, ZooEntry] = {}
    for file in zoo_files():
        for name, entry in _load(str(file.resolve())).items():
            if name in merged:
                raise ConfigError(f"{file}: zoo name {name!r} is also in {merged[name].home}")
            merged[name] = entry
    return merged


def zoo_entry(name: str, path: str | Path | None = None) -> ZooEntry:
    zoo = load_zoo(path)
    if name not in zoo:
        close = difflib.get_close_matches(name, list(zoo), n=3)
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        raise ConfigError(f"unknown zoo checkpoint {name!r}{hint} (`ssl-bench zoo list` shows all "
                          f"{len(zoo)})")
    return zoo[name]


def zoo_list(method: str | None = None, path: str | Path | None = None) -> pd.DataFrame:
    """One row per published checkpoint (optionally of one method)."""
    rows = []
    for e in load_zoo(path).values():
        if method and e.method != method:
            continue
        rows.append({"name": e.name, "method": e.method, "arch": e.arch, "patch": e.patch_size,
                     "pretrain_data": e.pretrain_data, "epochs": e.epochs, "layout": e.layout,
                     "trust": "needed" if e.needs_trust else "",
                     "file": str(e.shipped_path()) if e.shipped else e.file,
                     "sha256": e.sha256 or "unknown",
                     "claims": ", ".join(f"{k} {v:g}" for k, v in e.claims.items()),
                     "url": "shipped with ssl-bench" if e.shipped else e.url})
    return pd.DataFrame(rows)


def format_zoo(df: pd.DataFrame, urls: bool = True) -> str:
    """Text for the terminal: a table, then the download URL of each checkpoint."""
    if df.empty:
        return "no checkpoints"
    cols = ["name", "method", "arch", "pretrain_data", "epochs", "layout", "trust", "claims"]
    table = df[cols].copy()
    table["epochs"] = table["epochs"].map(lambda v: "-" if v is None or v != v else str(int(v)))
    header = cols
    rows = [[str(v) for v in r] for r in table.values]
    widths = [max(len(x) for x in [h] + [r[j] for r in rows]) for j, h in enumerate(header)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(header, widths)), "  ".join("-" * w for w in widths)]
    lines += ["  ".join(v.ljust(w) for v, w in zip(r, widths)) for r in rows]
    if urls:
        lines += ["", "Download (nothing is downloaded for you), then `ssl-bench zoo import NAME FILE`:"]
        lines += [f"  {n:24s} {u}" for n, u in zip(df["name"], df["url"])]
    return "\n".join(lines)


def verify_shipped(entry: ZooEntry) -> Path:
    """The path of a shipped checkpoint whose size and sha256 are its entry's; else an error."""
    path = entry.shipped_path()
    problem = None
    if not path.is_file() or not path.with_suffix(".json").is_file():
        problem = "is missing (or its .json is)"
    elif path.stat().st_size != entry.size:
        problem = f"has {path.stat().st_size} bytes, its zoo entry {entry.size}"
    else:
        actual = sha256_file(path)
        if actual != entry.sha256.lower():
            problem = f"has sha256 {actual}, its zoo entry {entry.sha256}"
    if problem:
        raise CheckpointError(
            f"shipped checkpoint {entry.name}: {path} {problem}. It is not the file ssl-bench "
            f"ships; restore it (`git checkout -- {path}` in the checkout, or reinstall "
            f"ssl-bench), or retrain it with the command that made it (`ssl-bench zoo command {entry.name}`)")
    return path


# The folders of a recorded command (a shipped entry's provenance.command), which differ from
# machine to machine; everything else in it runs as recorded.
COMMAND_PLACEHOLDERS = {
    "{synthscenes}": "the SynthScenes folder of the entry's provenance.data, in this machine's data cache "
                     "(`ssl-bench data synth --preset P --seed S` makes it)",
    "{out}": "the output folder of the training",
}


def recorded_command(entry: ZooEntry, out: str | Path) -> list[str]:
    """The arguments of ``ssl-bench`` that made the shipped checkpoint ``entry``, with its
    placeholders resolved on this machine: ``{out}`` to ``out``, ``{synthscenes}`` to the
    SynthScenes cache folder of the preset and seed the entry was trained on."""
    command = entry.provenance.get("command") or ""
    if not command.startswith("ssl-bench "):
        raise ConfigError(f"{entry.name}: no recorded `ssl-bench ...` command in its provenance "
                          f"(found {command!r})")
    values = {"{out}": str(Path(out).expanduser().resolve())}
    if "{synthscenes}" in command:
        values["{synthscenes}"] = str(_synthscenes_folder(entry))
    args = shlex.split(command)[1:]
    resolved = [re.sub(r"\{[a-z_]+\}", lambda m: values.get(m.group(0), m.group(0)), a) for a in args]
    left = sorted({m for a in resolved for m in re.findall(r"\{[a-z_]+\}", a)})
    if left:
        raise ConfigError(f"{entry.name}: its recorded command holds {', '.join(left)}, which this harness "
                          f"does not resolve; known placeholders: {', '.join(COMMAND_PLACEHOLDERS)}")
    return resolved


def _synthscenes_folder(entry: ZooEntry) -> Path:
    from harness.data.synthetic import GENERATOR_VERSION, default_root

    synth = (entry.provenance.get("data") or {}).get("synthscenes") or {}
    if not {"preset", "seed", "version"} <= set(synth):
        raise ConfigError(f"{entry.name}: its recorded command names {{synthscenes}} but its provenance.data "
                          f"says no SynthScenes preset, seed and version (found {synth})")
    if synth["version"] != GENERATOR_VERSION:
        raise ConfigError(f"{entry.name} was trained on SynthScenes v{synth['version']}; this harness generates "
                          f"v{GENERATOR_VERSION}, other images: its command cannot run on the data it was "
                          f"recorded with (use the ssl-bench version of its code_commit)")
    return default_root(synth["preset"], int(synth["seed"]))


def format_recorded_command(entry: ZooEntry, out: str | Path) -> str:
    """The shell lines that retrain ``entry`` here: the data generation, when its SynthScenes
    folder is not there yet, then the recorded command."""
    lines = []
    if "{synthscenes}" in entry.provenance.get("command", "") and not _synthscenes_folder(entry).is_dir():
        synth = entry.provenance["data"]["synthscenes"]
        lines.append(f"ssl-bench data synth --preset {shlex.quote(str(synth['preset']))} --seed {int(synth['seed'])}")
    lines.append(shlex.join(["ssl-bench", *recorded_command(entry, out)]))
    return "\n".join(lines)


def verify_file(entry: ZooEntry, file: str | Path) -> str:
    """sha256 of the downloaded file; an error if the zoo knows another value."""
    actual = sha256_file(Path(file))
    if entry.sha256 and actual != entry.sha256.lower():
        raise CheckpointError(
            f"{file}: sha256 {actual} does not match {entry.sha256} recorded for {entry.name} "
            f"({entry.url}). The download is corrupt or another file; download it again.")
    return actual


def zoo_import(name: str, file: str | Path, out_dir: str | Path, trust: bool = False,
               zoo_path: str | Path | None = None, img_size: int | None = None) -> Path:
    """Import a downloaded official file as ``<out_dir>/<name>.safetensors`` (+ ``.json``).

    The zoo entry fixes layout, arch and branch, so a wrong file is an error, not a
    silent mis-load. Returns the .safetensors path."""
    entry = zoo_entry(name, zoo_path)
    file = Path(file)
    if not file.is_file():
        raise CheckpointError(f"{file} not found; download {entry.name} from {entry.url}")
    verify_file(entry, file)
    meta = {"zoo_name": entry.name, "pretrain_data": entry.pretrain_data, "epochs": entry.epochs,
            "source_url": entry.url, "claims": entry.claims}
    # `which` picks a branch of a full training checkpoint; a backbone-only file (e.g. iBOT's
    # checkpoint_student.pth) already is the branch the entry names.
    which = entry.which if LAYOUTS[entry.layout].has_student else "teacher"
    _, report = import_checkpoint(file, Path(out_dir) / entry.name, layout=entry.layout, which=which,
                                  arch=entry.arch, img_size=img_size, trust=trust, meta=meta)
    if report.method != entry.method:
        raise CheckpointError(f"{file}: layout {entry.layout} gives method {report.method}, zoo says {entry.method}")
    print(report.summary())
    return Path(report.saved)


# ----------------------------------------------------------------------------- lookup
@dataclass
class ZooLookup:
    name: str
    status: str  # "harness" | "official" | "missing" | "unknown"
    path: Path | None
    message: str
    entry: ZooEntry | None = None


def find_checkpoint(name: str, zoo_dir: str | Path | None, zoo_path: str | Path | None = None) -> ZooLookup:
    """Where a zoo model is in ``zoo_dir``: an imported harness checkpoint ``<name>.safetensors``
    (any name, also names not in the zoo file), else the official file at
    ``<name>/<file>``, ``<url folder>/<file>`` or ``<file>``."""
    entry = load_zoo(zoo_path).get(name)
    if entry is not None and entry.shipped:
        path = verify_shipped(entry)
        return ZooLookup(name, "harness", path, f"shipped checkpoint {path}", entry)
    if zoo_dir is None:
        return ZooLookup(name, "missing", None, "no zoo directory given", entry)
    zoo_dir = Path(zoo_dir)
    for cand in (zoo_dir / f"{name}.safetensors", zoo_dir / name / f"{name}.safetensors"):
        if cand.is_file() and cand.with_suffix(".json").is_file():
            return ZooLookup(name, "harness", cand, f"harness checkpoint {cand}", entry)
    if entry is None:
        return ZooLookup(name, "unknown", None,
                         f"{name!r} is neither in the zoo nor imported under {zoo_dir}; `ssl-bench zoo list` "
                         f"names the zoo's checkpoints", None)
    candidates = [zoo_dir / name / entry.file, zoo_dir / entry.url_dir / entry.file, zoo_dir / entry.file]
    for cand in candidates:
        if cand.is_file():
            return ZooLookup(name, "official", cand, f"official file {cand} (imported on first use)", entry)
    return ZooLookup(name, "missing", None,
                     f"download {entry.url} to {candidates[0]} (or run `ssl-bench zoo import {name} FILE "
                     f"--out {zoo_dir}`)", entry)


def zoo_model(name: str, zoo_dir: str | Path, trust: bool = False, zoo_path: str | Path | None = None,
              display_name: str | None = None):
    """A ModelHandle (named ``display_name`` or the zoo name) for a shipped zoo model or one found
    in ``zoo_dir``; an official file is imported into ``<zoo_dir>/<name>.safetensors`` first (once)."""
    from harness.models.handle import ModelHandle

    found = find_checkpoint(name, zoo_dir, zoo_path)
    if found.status == "official":
        zoo_import(name, found.path, zoo_dir, trust=trust, zoo_path=zoo_path)
        found = find_checkpoint(name, zoo_dir, zoo_path)
    if found.status != "harness":
        raise CheckpointError(found.message)
    return ModelHandle.from_checkpoint(found.path, name=display_name or name)


# ----------------------------------------------------------------------------- CLI
def add_cli(subparsers) -> None:
    """Adds `zoo list|import|convert|command` to an argparse subparsers object."""
    z = subparsers.add_parser("zoo", help="published checkpoints: list, import, convert; the command of a shipped one")
    zs = z.add_subparsers(dest="zoo_command", required=True)
    ls = zs.add_parser("list", help="list the published checkpoints with their download URLs")
    ls.add_argument("--method", default=None)
    ls.add_argument("--no-urls", action="store_true")
    ls.set_defaults(func=cmd_zoo_list)
    im = zs.add_parser("import", help="convert a downloaded zoo checkpoint into the harness format")
    im.add_argument("name")
    im.add_argument("file")
    im.add_argument("--out", default=None, help="output folder (default: the reproduce zoo dir)")
    im.add_argument("--trust-checkpoint", action="store_true",
                    help="allow unpickling (official full checkpoints); check the file's origin first")
    im.add_argument("--img-size", type=int, default=None, help="resize position embeddings for this input size")
    im.set_defaults(func=cmd_zoo_import)
    cv = zs.add_parser("convert", help="convert any file of a known layout (auto-detected; see --layout)")
    cv.add_argument("file")
    cv.add_argument("--out", required=True, help="output path without suffix")
    cv.add_argument("--layout", default=None, choices=sorted(LAYOUTS))
    cv.add_argument("--arch", default=None)
    cv.add_argument("--which", default=None, choices=["teacher", "student"],
                    help="branch of a two-backbone file (default: the one the official loader reads)")
    cv.add_argument("--img-size", type=int, default=None)
    cv.add_argument("--drop", action="append", default=[], metavar="PATTERN",
                    help="extra key pattern to drop (e.g. 'projector.*'); reported in the audit")
    cv.add_argument("--trust-checkpoint", action="store_true")
    cv.add_argument("--pos-interp", default=None, choices=["official", "timm"],
                    help="how the checkpoint resizes its position embeddings when loaded (default official: "
                         "the DINO family's; timm: a timm ViT's own, the same features as --model timm:NAME)")
    cv.set_defaults(func=cmd_zoo_convert)
    cm = zs.add_parser("command", help="the command that made a shipped checkpoint, resolved for this machine",
                       description="Prints the recorded `ssl-bench` command of a shipped checkpoint with its "
                                   "placeholders resolved (" + "; ".join(f"{k}: {v}" for k, v in
                                                                         COMMAND_PLACEHOLDERS.items())
                                   + "), preceded by the data generation when the data is not there yet. "
                                     "It runs as printed; append `--set train.max_steps=N` (pretrain) or "
                                     "`--set steps=N` (supervised) to stop after N steps.")
    cm.add_argument("name")
    cm.add_argument("--out", default=None, help="output folder of the retraining (default ./NAME)")
    cm.set_defaults(func=cmd_zoo_command)


def cmd_zoo_list(args) -> int:
    print(format_zoo(zoo_list(args.method), urls=not args.no_urls))
    return 0


def cmd_zoo_import(args) -> int:
    path = zoo_import(args.name, args.file, args.out or default_zoo_dir(), trust=args.trust_checkpoint,
                      img_size=args.img_size)
    print(f"imported: {path}")
    return 0


def cmd_zoo_convert(args) -> int:
    _, report = import_checkpoint(args.file, args.out, layout=args.layout, which=args.which, arch=args.arch,
                                  img_size=args.img_size, trust=args.trust_checkpoint, extra_drop=tuple(args.drop),
                                  meta={"pos_interp": args.pos_interp} if args.pos_interp else None)
    print(report.summary())
    return 0


def cmd_zoo_command(args) -> int:
    entry = zoo_entry(args.name)
    if not entry.shipped:
        raise ConfigError(f"{entry.name} is a published checkpoint, not one ssl-bench trained: it records no "
                          f"command; shipped ones: {', '.join(n for n, e in load_zoo().items() if e.shipped)}")
    print(format_recorded_command(entry, args.out or Path.cwd() / entry.name))
    return 0


__all__ = ["add_cli", "cmd_zoo_list", "cmd_zoo_command", "recorded_command", "format_recorded_command",
           "COMMAND_PLACEHOLDERS", "cmd_zoo_import", "cmd_zoo_convert", "ZooEntry", "ZooLookup", "load_zoo",
           "zoo_files", "verify_shipped", "zoo_entry", "zoo_list", "format_zoo", "verify_file",
           "zoo_import", "find_checkpoint", "zoo_model"]
