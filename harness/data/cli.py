"""`ssl-bench data`: the data-set catalogue (`list`), a root checked against it (`check`), an official
download rearranged into a reader's layout (`prepare`), and the SynthScenes sets (`synth`: the core
set or, with `--for`, the set a protocol reads)."""
from __future__ import annotations

from pathlib import Path


def synthetic_protocols() -> list[str]:
    """The protocols that declare a SynthScenes set of their own (torch-free)."""
    from harness.registry import protocol_declarations

    return sorted(name for name, d in protocol_declarations().items() if d.synthetic)


def cmd_data_synth(args) -> int:
    if args.for_protocol:
        from harness.data.declared_synthetic import generate_declared

        if args.out:
            from harness.data.declared_synthetic import declared_generator

            path = Path(declared_generator(args.for_protocol)(Path(args.out), preset=args.preset, seed=args.seed,
                                                              progress=not args.no_progress))
        else:
            path = generate_declared(args.for_protocol, args.preset, args.seed, progress=not args.no_progress)
        print(f"SynthScenes set of {args.for_protocol} ({args.preset}, seed {args.seed}) at {path}")
        print(f"  use it as: ssl-bench eval --protocol {args.for_protocol} --preset synth --data-root {path} ...")
        return 0
    from harness.data.synthetic import default_root, generate

    out = Path(args.out) if args.out else default_root(args.preset, args.seed)
    path = generate(out, preset=args.preset, seed=args.seed, progress=not args.no_progress)
    print(f"SynthScenes ({args.preset}, seed {args.seed}) at {path}")
    return 0


def cmd_data_list(args) -> int:
    from harness.data.catalogue import catalogue, describe, resolve

    cat = catalogue()
    chosen = [resolve(k)[0] for k in args.keys] if args.keys else list(cat.datasets.values())
    blocks = ["\n".join(describe(ds)) for ds in chosen]
    print("\n\n".join(blocks))
    if not args.keys:
        aliases = sorted(r for r in cat.readers() if r not in cat.datasets)
        print(f"\n{len(cat.datasets)} data sets, {len(cat.readers())} reader keys; old keys that name a layout "
              f"(still accepted): {', '.join(aliases)}")
    return 0


def cmd_data_check(args) -> int:
    from harness.data.check import check_root

    report = check_root(args.key, args.data_root, deep=args.deep)
    print(report.text())
    return 0 if report.ready else 2


def cmd_data_prepare(args) -> int:
    from harness.data.check import check_root
    from harness.data.prepare import prepare

    out = prepare(args.key, args.from_dir, args.out)
    report = check_root(args.key, out)
    print(report.text())
    return 0 if report.ready else 2


def add_cli(sub) -> None:
    d = sub.add_parser("data", help="data sets: list the catalogue, check a root, generate SynthScenes sets")
    dsub = d.add_subparsers(dest="data_command", required=True)
    for_help = ", ".join(synthetic_protocols())
    s = dsub.add_parser("synth", help="generate SynthScenes (the core set, or with --for the set a protocol reads)",
                        description=f"Without --for: the core SynthScenes set (VOC2012, ADE20K, ImageFolder, "
                                    f"captions layouts). With --for PROTOCOL: that protocol's own set ({for_help}).")
    s.add_argument("--for", dest="for_protocol", default=None, metavar="PROTOCOL",
                   help=f"write the SynthScenes set this protocol reads: {for_help}")
    s.add_argument("--out", default=None, help="folder (default: the cache folder suites use)")
    s.add_argument("--preset", default="small", help="tiny, small, medium (default small)")
    s.add_argument("--seed", type=int, default=0)
    s.add_argument("--no-progress", action="store_true")
    s.set_defaults(func=cmd_data_synth)
    ls = dsub.add_parser("list", help="every data set key: readers, official splits and sizes, sources, layouts")
    ls.add_argument("keys", nargs="*", help="only these keys (KEY, KEY:LAYOUT or an old key)")
    ls.set_defaults(func=cmd_data_list)
    c = dsub.add_parser("check", help="check a data root against its layout and official sizes (exit 0 ready, 2 not)")
    c.add_argument("key", help="data set key, KEY:LAYOUT, or an old key (`ssl-bench data list`)")
    c.add_argument("--data-root", required=True)
    c.add_argument("--deep", action="store_true", help="decode every file and list the unreadable ones")
    c.set_defaults(func=cmd_data_check)
    p = dsub.add_parser("prepare", help="rearrange an official download into the reader's layout, then check it "
                                        "(idempotent, resumable; the download is never written into)")
    p.add_argument("key", help="data set key (`ssl-bench data list` shows which have a prepare step)")
    p.add_argument("--from", dest="from_dir", required=True, metavar="DOWNLOAD",
                   help="folder holding the official download's files, as downloaded")
    p.add_argument("--out", required=True, help="the data root to write")
    p.set_defaults(func=cmd_data_prepare)
