"""The data-set catalogue, as data: one entry per data set key with its official splits (sizes,
classes), where the official files come from, the docs section with the layout, and its named
layouts (each read by one registered reader key).

Entries live in ``harness.data.core_catalogue`` and in a torch-free ``catalogue.py`` in any
sub-folder of the packages the ``ssl_bench.protocol_packages`` entry points name (``CATALOGUE``: a
tuple of :class:`DataSet` and :class:`ExtraLayout`; an ExtraLayout adds a layout to a data set
declared elsewhere): a folder lists the data sets it reads, whether their readers live in
``harness/data`` or in the folder, in the order `ssl-bench data list` shows them.
The protocols that read a data set come from the protocol declarations (``datasets`` and ``reads``),
so the core lists none.

A reader key that is not its data set's key (``voc12aug``, ``nyu_probe3d``, ...) keeps working: it
is an alias of that data set's layout, and :func:`alias_note` says so in one line.
"""
from __future__ import annotations

import importlib
import pkgutil
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from pathlib import Path

from harness.errors import ConfigError

CATALOGUE_MODULE = "catalogue"  # the file a protocol folder lists its data sets in
CORE_CATALOGUE = "harness.data.core_catalogue"


@dataclass(frozen=True)
class Split:
    """One official split: ``size`` items (``unit``: images, sequences, pairs, queries, ...) in
    ``classes`` classes; ``size`` None where the split is drawn by a script rather than published.
    ``reader_split``: the name the reader takes (default ``name``)."""

    name: str
    size: int | None
    unit: str = "images"
    classes: int | None = None
    reader_split: str | None = None
    note: str = ""

    @property
    def split_arg(self) -> str | None:
        """What the reader's ``split`` argument is ("" in ``reader_split``: None, the root itself)."""
        if self.reader_split == "":
            return None
        return self.reader_split if self.reader_split is not None else self.name


@dataclass(frozen=True)
class Layout:
    """A layout of a data set on disk, read by the registered reader ``reader``; ``splits``: the
    official splits it holds (empty: the data set's); ``height``: the image height of a layout of one
    resolution."""

    name: str
    reader: str
    description: str
    docs: str = ""
    splits: tuple[Split, ...] = ()
    height: int | None = None  # a layout of one resolution (DAVIS 480p): its image height
    checks: str | None = None  # a module whose check(root) -> (facts, problems) adds the layout's own checks
    prepare: str | None = None  # this layout's `data prepare` module, where it is not the data set's


@dataclass(frozen=True)
class DataSet:
    key: str
    title: str
    source: str          # where the official files come from (text; nothing downloads them)
    docs: str            # the docs section that shows the layout
    layouts: tuple[Layout, ...]
    splits: tuple[Split, ...] = ()
    synthetic_only: bool = False
    prepare: str | None = None  # the module of `ssl-bench data prepare KEY` (harness.data.prepare)

    def layout(self, name: str | None) -> Layout:
        if name is None:
            return self.layouts[0]
        for lay in self.layouts:
            if lay.name == name:
                return lay
        raise ConfigError(f"data set {self.key!r} has no layout {name!r}; its layouts: "
                          f"{', '.join(lay.name for lay in self.layouts)}")

    def splits_of(self, layout: Layout) -> tuple[Split, ...]:
        return layout.splits or self.splits


@dataclass(frozen=True)
class ExtraLayout:
    """A layout that a folder's reader adds to the data set ``dataset`` declared elsewhere."""

    dataset: str
    layout: Layout


@dataclass
class Catalogue:
    datasets: dict[str, DataSet] = field(default_factory=dict)
    where: dict[str, str] = field(default_factory=dict)

    def add(self, item, module: str) -> None:
        if isinstance(item, ExtraLayout):
            base = self.datasets.get(item.dataset)
            if base is None:
                raise ConfigError(f"{module}: layout {item.layout.name!r} of unknown data set {item.dataset!r}")
            self.datasets[item.dataset] = DataSet(**{**base.__dict__, "layouts": base.layouts + (item.layout,)})
        elif isinstance(item, DataSet):
            if item.key in self.datasets:
                raise ConfigError(f"data set {item.key!r} is catalogued twice: in {self.where[item.key]} and {module}")
            self.datasets[item.key], self.where[item.key] = item, module
        else:
            raise ConfigError(f"{module}: CATALOGUE holds {item!r}, not a DataSet or an ExtraLayout")

    def readers(self) -> dict[str, tuple[DataSet, Layout]]:
        """Reader key -> (data set, layout)."""
        out: dict[str, tuple[DataSet, Layout]] = {}
        for ds in self.datasets.values():
            for lay in ds.layouts:
                out.setdefault(lay.reader, (ds, lay))
        return out


def catalogue_modules() -> list[str]:
    """The core catalogue and every protocol folder's ``catalogue.py``, by module name."""
    found = [CORE_CATALOGUE]
    for ep in entry_points(group="ssl_bench.protocol_packages"):
        package = ep.load()
        for info in pkgutil.iter_modules(list(package.__path__)):
            if info.ispkg and any((Path(p) / info.name / f"{CATALOGUE_MODULE}.py").is_file()
                                  for p in package.__path__):
                found.append(f"{package.__name__}.{info.name}.{CATALOGUE_MODULE}")
    return found


_CATALOGUE: Catalogue | None = None


def catalogue() -> Catalogue:
    """Every catalogued data set (read once; torch-free). Data sets first, then extra layouts."""
    global _CATALOGUE
    if _CATALOGUE is None:
        cat = Catalogue()
        items = [(item, m) for m in catalogue_modules() for item in importlib.import_module(m).CATALOGUE]
        for item, module in sorted(items, key=lambda pair: isinstance(pair[0], ExtraLayout)):
            cat.add(item, module)
        _CATALOGUE = cat
    return _CATALOGUE


def resolve(name: str) -> tuple[DataSet, Layout]:
    """``KEY``, ``KEY:LAYOUT`` or a reader key (an alias) -> (data set, layout)."""
    cat = catalogue()
    key, _, layout = name.partition(":")
    if key in cat.datasets:
        return cat.datasets[key], cat.datasets[key].layout(layout or None)
    readers = cat.readers()
    if key in readers and not layout:
        return readers[key]
    raise ConfigError(f"unknown data set {name!r}; `ssl-bench data list` shows the keys: "
                      f"{', '.join(sorted(cat.datasets))}")


def reader_key(name: str) -> str:
    """The reader key a data set name is served by: ``KEY:LAYOUT`` -> that layout's reader; any other
    name unchanged (a data set's own key, an old key, or a name the protocol's reader will judge)."""
    if ":" not in name:
        return name
    return resolve(name)[1].reader


def alias_note(name: str) -> str | None:
    """One line for a reader key that is a layout of another key; None for a data set's own key."""
    cat = catalogue()
    if name in cat.datasets or ":" in name:
        return None
    ds, lay = resolve(name)
    return (f"note: {name!r} is the {lay.name!r} layout of data set {ds.key!r} ({ds.key}:{lay.name}); "
            "the old key keeps working")


def protocols_reading(ds: DataSet) -> list[str]:
    """The protocols whose declarations name one of the data set's reader keys (``datasets`` or
    ``reads``), sorted."""
    from harness.registry import protocol_declarations

    keys = {lay.reader for lay in ds.layouts} | {ds.key}
    return sorted(d.name for d in protocol_declarations().values()
                  if keys & (set(d.datasets) | set(d.reads)))


def _fmt_split(s: Split) -> str:
    size = "size set by a script" if s.size is None else f"{s.size:,} {s.unit}"
    classes = f", {s.classes:,} classes" if s.classes else ""
    return f"{s.name} {size}{classes}"


def describe(ds: DataSet) -> list[str]:
    """The lines `ssl-bench data list` prints for one data set."""
    readers = protocols_reading(ds)
    lines = [f"{ds.key}: {ds.title}" + ("  [SynthScenes only]" if ds.synthetic_only else "")]
    lines.append(f"  read by: {', '.join(readers) or '(no declared protocol)'}")
    for lay in ds.layouts:
        alias = "" if lay.reader == ds.key else f"  (old key {lay.reader!r})"
        lines.append(f"  layout {lay.name} (--dataset {ds.key}:{lay.name}): {lay.description}{alias}")
        splits = ds.splits_of(lay)
        if splits:
            lines.append(f"    splits: {'; '.join(_fmt_split(s) for s in splits)}")
    lines.append(f"  official files: {ds.source}")
    lines.append(f"  layout docs: {ds.docs}")
    if ds.prepare:
        lines.append(f"  prepare: ssl-bench data prepare {ds.key} --from DOWNLOAD --out DIR")
    for lay in ds.layouts:
        if lay.prepare:
            lines.append(f"  prepare: ssl-bench data prepare {ds.key}:{lay.name} --from DOWNLOAD --out DIR")
    return lines
