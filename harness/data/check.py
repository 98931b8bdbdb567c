"""``ssl-bench data check``: a data root against its catalogue entry (harness.data.catalogue), read
through the registered reader of the layout, on one screen: per official split what is there, what
is missing and what does not match (counts and classes against the official sizes, masks whose size
differs from their image, palette vs index PNGs, depth units); with ``deep`` every image, mask and
depth map is decoded and the unreadable ones are listed.

A SynthScenes root declares itself by the meta.json the generators write last (in the root or up
to two folders above it): its sizes are synthetic, so official-size mismatches are reported as
expected there and do not make the root unready.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from harness.data.catalogue import DataSet, Layout, Split, alias_note, catalogue, resolve
from harness.errors import SslBenchError

SHOWN = 5  # names listed per problem


@dataclass
class CheckReport:
    dataset: DataSet
    layout: Layout
    root: Path
    synthetic: dict | None
    lines: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    @property
    def ready(self) -> bool:
        return not self.problems

    def text(self) -> str:
        kind = f"SynthScenes set (preset {self.synthetic.get('preset', '?')}, sizes synthetic)" if self.synthetic \
            else "official data"
        head = [f"data check {self.dataset.key}:{self.layout.name} (reader {self.layout.reader!r}) at {self.root}",
                f"  {kind}"]
        verdict = "READY" if self.ready else f"NOT READY: {len(self.problems)} problem(s)"
        return "\n".join(head + self.lines + [f"  -> {verdict}"] + [f"     - {p}" for p in self.problems])


def synthetic_meta(root: Path) -> dict | None:
    """The generator's meta.json for a SynthScenes root (in it or up to two folders above); None
    for any other root."""
    for folder in [root, *list(root.resolve().parents)[:2]]:
        path = folder / "meta.json"
        if path.is_file():
            try:
                meta = json.loads(path.read_text())
            except (OSError, ValueError):
                return None
            # every SynthScenes generator (the core one, the protocols' own) names itself synthscenes*
            named = isinstance(meta, dict) and str(meta.get("generator", "")).startswith("synthscenes")
            return meta if named else None
    return None


def _listing(names: list[str]) -> str:
    more = f" and {len(names) - SHOWN} more" if len(names) > SHOWN else ""
    return ", ".join(str(n) for n in names[:SHOWN]) + more


def _count(reader, unit: str) -> int:
    """The split's size in the catalogue's unit: a video reader's items are frames, its unit sequences."""
    for attr in (unit,) if unit in ("sequences", "pairs") else ():
        if hasattr(reader, attr):
            return len(getattr(reader, attr))
    return len(reader)


def _num_classes(reader) -> int | None:
    n = getattr(reader, "num_classes", None)
    if n is None and getattr(reader, "classes", None) is not None:
        n = len(reader.classes)
    return int(n) if n is not None else None


def _image_mask_paths(reader) -> tuple[list, list]:
    """(images, masks) in pairs: a segmentation reader's lists, or a video reader's frames."""
    if getattr(reader, "mask_paths", None):
        return list(reader.image_paths), list(reader.mask_paths)
    images, masks = [], []
    for seq in getattr(reader, "sequences", []) or []:
        if len(seq.frames) == len(seq.annotations):
            images += list(seq.frames)
            masks += list(seq.annotations)
    return images, masks


def _height_findings(reader, height: int | None, synthetic: bool) -> tuple[list[str], list[str]]:
    """A layout of one resolution (DAVIS 480p): the heights of the first images."""
    from harness.data.io import image_size

    images = _image_mask_paths(reader)[0] or list(getattr(reader, "image_paths", []) or [])
    if height is None or not images:
        return [], []
    heights = sorted({image_size(p)[1] for p in images[:3]})
    fact = f"image heights (first {min(3, len(images))}): {', '.join(map(str, heights))} px, layout {height} px"
    if heights != [height] and not synthetic:
        return [fact], [f"images are {heights} px high, not {height}: another resolution of the data set"]
    return [fact], []


def _mask_findings(reader) -> tuple[list[str], list[str]]:
    """(facts, problems) of the masks, from their headers: size vs image, PNG mode."""
    from PIL import Image

    from harness.data.io import image_size

    images, masks = _image_mask_paths(reader)
    if not masks:
        return [], []
    modes: dict[str, int] = {}
    wrong_size, absent, unreadable = [], [], []
    for img, mask in zip(images, masks):
        if not Path(mask).is_file():
            absent.append(Path(mask).name)
            continue
        try:
            with Image.open(mask) as m:
                modes[m.mode] = modes.get(m.mode, 0) + 1
                if Path(img).is_file() and m.size != image_size(img):
                    wrong_size.append(Path(mask).name)
        except (OSError, SslBenchError):
            unreadable.append(Path(mask).name)
    facts = [f"masks: {', '.join(f'{n} {mode}' for mode, n in sorted(modes.items()))} "
             f"(P = palette indices, L = grey indices)"]
    problems = []
    if absent:
        problems.append(f"{len(absent)} masks absent: {_listing(absent)}")
    if unreadable:
        problems.append(f"{len(unreadable)} masks or their images have unreadable headers: {_listing(unreadable)}")
    if wrong_size:
        problems.append(f"{len(wrong_size)} masks differ in size from their image: {_listing(wrong_size)}")
    other = {m: n for m, n in modes.items() if m not in ("P", "L")}
    if other:
        problems.append(f"masks in mode {', '.join(other)} (colour masks, not label indices): convert to P or L")
    return facts, problems


def _depth_findings(reader) -> tuple[list[str], list[str]]:
    """The depth range of the first maps, in metres, as the reader returns them."""
    if not hasattr(reader, "load_depth") or not len(reader):
        return [], []
    values = []
    for i in range(min(3, len(reader))):
        d = np.asarray(reader.load_depth(i), dtype=np.float64)
        d = d[np.isfinite(d) & (d > 0)]
        if d.size:
            values.append(d)
    if not values:
        return [], ["the first depth maps hold no valid depth"]
    d = np.concatenate(values)
    fact = f"depth (first {len(values)} maps): {d.min():.3g}-{d.max():.3g} m, median {np.median(d):.3g} m"
    if not 0.01 <= float(np.median(d)) <= 200:
        return [fact], [f"depth median {np.median(d):.3g} m is implausible: check the depth units (mm vs m)"]
    return [fact], []


def _deep_findings(reader) -> tuple[list[str], list[str]]:
    """Decode every item: (what was decoded, the unreadable ones)."""
    loaders = [getattr(reader, name) for name in ("load_image", "load_mask", "load_depth") if hasattr(reader, name)]
    if not loaders:
        return ["--deep: this reader has no per-item loader; nothing decoded"], []
    bad = []
    for i in range(len(reader)):
        for load in loaders:
            try:
                load(i)
            except Exception as exc:  # any decoder failure is the finding
                bad.append(f"item {i} ({load.__name__}): {str(exc).splitlines()[0][:120]}")
    done = f"--deep: {len(reader)} items decoded ({', '.join(load.__name__ for load in loaders)})"
    return [done], ([f"{len(bad)} unreadable: {_listing(bad)}"] if bad else [])


def _check_split(report: CheckReport, split: Split, deep: bool) -> bool:
    """Check one split; whether the reader found it."""
    from harness.registry import DATASETS

    name = f"split {split.name}"
    try:
        reader = DATASETS.get(report.layout.reader)(report.root, split.split_arg)
    except SslBenchError as exc:
        # a SynthScenes set holds only the splits its protocol reads: a split whose file or folder
        # is not there is absent, not broken (the readers' errors say "not found" for it)
        absent = "not found" in str(exc).split(";")[0]
        if report.synthetic and absent:
            report.lines.append(f"  {name}: not in this SynthScenes set")
        else:
            report.lines.append(f"  {name}: {'MISSING' if absent else 'BROKEN (below)'}")
            report.problems.append(f"{name}: {str(exc).splitlines()[0]}")
        return False
    n, classes = _count(reader, split.unit), _num_classes(reader)
    got = f"{n:,} {split.unit}" + (f", {classes:,} classes" if classes is not None else "")
    want = [f"{split.size:,}" if split.size is not None else None,
            f"{split.classes:,} classes" if split.classes and classes is not None else None]
    official = " / ".join(w for w in want if w)
    mismatch = (split.size is not None and n != split.size) or (
        split.classes is not None and classes is not None and classes != split.classes)
    status = "ok" if not mismatch else ("synthetic, official " + official if report.synthetic
                                        else "DOES NOT MATCH official " + official)
    report.lines.append(f"  {name}: {got}" + (f" ({status})" if official else ""))
    if mismatch and not report.synthetic:
        report.problems.append(f"{name}: {got}, official {official}")
    found = [_mask_findings(reader), _depth_findings(reader),
             _height_findings(reader, report.layout.height, bool(report.synthetic))]
    for facts, problems in found:
        report.lines += [f"    {f}" for f in facts]
        report.problems += [f"{name}: {p}" for p in problems]
    if deep:
        facts, problems = _deep_findings(reader)
        report.lines += [f"    {f}" for f in facts]
        report.problems += [f"{name}: {p}" for p in problems]
    return True


def check_root(name: str, root: str | Path, deep: bool = False) -> CheckReport:
    """Check ``root`` as the data set ``name`` (key, key:layout, or a reader key)."""
    ds, layout = resolve(name)
    root = Path(root)
    report = CheckReport(ds, layout, root, synthetic_meta(root) if root.exists() else None)
    note = alias_note(name)
    if note:
        report.lines.append(f"  {note}")
    if not root.is_dir():
        report.problems.append(f"data root {root} does not exist or is not a folder")
        return report
    from harness.registry import DATASETS

    if getattr(DATASETS.get(layout.reader), "harness_reader", True) is False and layout.checks:
        import importlib

        # a layout mmseg reads, checked by its own module (counts, masks) instead of a reader
        facts, problems = importlib.import_module(layout.checks).check(root)
        report.lines += [f"  {f}" for f in facts]
        report.problems += problems
        return report
    if getattr(DATASETS.get(layout.reader), "harness_reader", True) is False:
        report.problems.append(f"{layout.reader!r} has no reader in the harness (mmsegmentation reads it inside "
                               f"the protocol): this layout cannot be checked here")
        return report
    found = [_check_split(report, split, deep) for split in ds.splits_of(layout)]
    if layout.checks and any(found) and not report.synthetic:
        import importlib

        facts, problems = importlib.import_module(layout.checks).check(root)
        report.lines += [f"  {f}" for f in facts]
        report.problems += problems
    if report.synthetic and not any(found):
        report.problems.append(f"no split of {ds.key}:{layout.name} found in this SynthScenes set{_synth_hint(layout)}")
    return report


def _synth_hint(layout: Layout) -> str:
    """Where a SynthScenes set of the layout comes from: a protocol that reads the layout's reader key
    and declares one."""
    from harness.registry import protocol_declarations

    makers = sorted(name for name, d in protocol_declarations().items()
                    if d.synthetic and layout.reader in (*d.datasets, *d.reads))
    return f"; `ssl-bench data synth --for {makers[0]}` writes one" if makers else ""


def hint(dataset: str, root: str | Path) -> str:
    """What a protocol's data error ends with: the command that explains it, naming the data set
    by its one key (``KEY:LAYOUT`` for a layout other than the key's own reader)."""
    found = catalogue().readers().get(dataset) if ":" not in dataset else None
    if found is not None and (found[0].key != dataset or found[0].layout(None) is not found[1]):  # not the key's own
        dataset = f"{found[0].key}:{found[1].name}"
    return f"check the root with `ssl-bench data check {dataset} --data-root {root}`"
