"""Install SimCLRv2's ImageNet label-fraction lists (1% and 10%) where ``train_subset`` finds them.

    python -m scripts.get_subsets                      # download them (pinned commit, sha256 checked)
    python -m scripts.get_subsets --simclr CHECKOUT    # or copy them from a checkout of google-research/simclr
    python -m scripts.get_subsets --out DIR            # default: $SSL_BENCH_HOME/subsets

Each file is written as ``<name>.txt`` (``imagenet_1pct.txt``, ``imagenet_10pct.txt``) only when its
sha256 is the one harness.data.subsets records for it; anything else is one ``error:`` line, exit 2.
"""
from __future__ import annotations

import argparse
import sys
import urllib.request
from pathlib import Path

from harness.data.subsets import KNOWN, check_known
from harness.errors import DataError
from harness.paths import home


def _read_from_checkout(checkout: Path, name: str) -> bytes:
    path = checkout / KNOWN[name].source_path
    if not path.is_file():
        raise DataError(f"{checkout} has no {KNOWN[name].source_path}: pass a checkout of google-research/simclr")
    return path.read_bytes()


def _download(name: str, timeout: float) -> bytes:
    url = KNOWN[name].url
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return response.read()
    except OSError as exc:
        raise DataError(f"could not download {url} ({exc}); clone google-research/simclr and pass --simclr "
                        f"CHECKOUT") from None


def install(names: list[str], out: Path, checkout: Path | None = None, timeout: float = 60.0) -> list[Path]:
    """Fetch, check and write each named list; nothing is written unless every list checks."""
    raw = {name: (_read_from_checkout(checkout, name) if checkout else _download(name, timeout)) for name in names}
    for name, data in raw.items():
        check_known(name, data, checkout / KNOWN[name].source_path if checkout else KNOWN[name].url)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for name, data in raw.items():
        (out / f"{name}.txt").write_bytes(data)
        written.append(out / f"{name}.txt")
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--simclr", type=Path, help="a checkout of google-research/simclr (else: download)")
    parser.add_argument("--out", type=Path, default=None, help="default: $SSL_BENCH_HOME/subsets")
    parser.add_argument("--only", choices=sorted(KNOWN), action="append", help="one list (repeatable)")
    args = parser.parse_args(argv)
    try:
        written = install(args.only or sorted(KNOWN), args.out or home() / "subsets", args.simclr)
    except DataError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for path in written:
        print(f"{path}  ({KNOWN[path.stem].images} images, sha256 {KNOWN[path.stem].sha256})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
