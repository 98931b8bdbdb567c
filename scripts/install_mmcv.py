"""Install the mmseg stack used by the ``seg_linear`` and ``segmenter`` protocols.

    python -m scripts.install_mmcv            # or: bash scripts/install_mmcv.sh
    python -m scripts.install_mmcv --dry-run  # download + patch the sdist, print the build command

mmsegmentation 1.2.2 asserts ``mmcv>=2.0.0rc4,<2.2.0`` and needs mmcv's compiled ops.
No mmcv 2.1 wheel exists for this torch, and the 2.1.0 sdist does not build as it is:
its setup.py imports ``pkg_resources`` (gone from setuptools >= 70) and compiles with
``-std=c++14/17`` while torch >= 2.10 headers need C++20. The ops are compiled against the
installed torch, so without torch it stops at once with one ``error:`` line (install ssl-bench
first). Then, in order:

1. nothing to do when ``import mmcv.ops, mmseg.models`` already works at the pinned versions
   (after one such check, a stamp keyed by the installed versions makes the no-op instant;
   ``--verify`` imports again);
2. a prebuilt wheel from ``$MMCV_WHEEL_DIR`` (or ``--wheel-dir``) or from the cache
   (``~/.cache/ssl-bench/wheels/torch-<version>/``, the wheel is tied to torch's C++ ABI);
   a wheel without the compiled extension (``mmcv/_ext*.so``) is named and skipped;
3. otherwise build one: ``pip download`` the sdist, raise its ``-std`` flags to C++20, and
   ``pip wheel --no-build-isolation`` it with ``MMCV_WITH_OPS=1 FORCE_CUDA=0`` inside a
   throwaway venv (``--system-site-packages``, so it sees this torch) that has
   ``setuptools<70``; the wheel goes to the cache, outside the repository (about 30 min
   on 2 cores).

Then the wheel, mmsegmentation, mmengine and their needs are installed into this Python and
``import mmseg.models`` is checked in a fresh interpreter. Nothing here imports mmcv,
mmengine or mmseg into the calling process.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import zipfile
from importlib import metadata
from pathlib import Path

MMCV_VERSION = "2.1.0"
MMSEG_VERSION = "1.2.2"
MMENGINE_VERSION = "0.10.7"
# ftfy/regex: mmseg.models imports its CLIP tokenizer; opencv 5 is newer than anything
# mmcv 2.1 was tested with, so keep 4.x.
EXTRA_REQUIREMENTS = ["ftfy", "regex", "opencv-python>=4,<5"]
INSTALL_COMMAND = "bash scripts/install_mmcv.sh  (or: python -m scripts.install_mmcv)"

_CHECK_SNIPPET = f"""
import mmcv, mmengine, mmseg
import mmcv.ops  # fails without the compiled extension
import mmseg.models
want = {{'mmcv': {MMCV_VERSION!r}, 'mmengine': {MMENGINE_VERSION!r}, 'mmseg': {MMSEG_VERSION!r}}}
have = {{'mmcv': mmcv.__version__, 'mmengine': mmengine.__version__, 'mmseg': mmseg.__version__}}
bad = {{k: v for k, v in have.items() if v != want[k]}}
if bad:
    raise SystemExit(f'version mismatch: have {{bad}}, want {{want}}')
print('ok', have)
"""


def log(msg: str) -> None:
    print(f"[install_mmcv] {msg}", flush=True)


def check_installed(python: str = sys.executable) -> tuple[bool, str]:
    """(ok, message) from importing the stack in a fresh interpreter."""
    proc = subprocess.run([python, "-c", _CHECK_SNIPPET], capture_output=True, text=True)
    out = (proc.stdout + proc.stderr).strip()
    return proc.returncode == 0, out.splitlines()[-1] if out else ""


def installed_versions() -> dict[str, str | None]:
    """Distribution versions from package metadata (cheap: imports nothing)."""
    out = {}
    for dist in ("torch", "mmcv", "mmengine", "mmsegmentation"):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[dist] = None
    return out


def cache_root() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "ssl-bench"


def cache_dir() -> Path:
    tag = re.sub(r"[^A-Za-z0-9_.-]", "_", installed_versions()["torch"] or "none")
    return cache_root() / "wheels" / f"torch-{tag}"


def _stamp_path() -> Path:
    # one stamp per interpreter: a venv and the system Python are checked separately
    tag = hashlib.sha256(sys.executable.encode()).hexdigest()[:12]
    return cache_root() / f"mmseg-stack-ok-{tag}.json"


def stamp_matches() -> bool:
    """True when a full import check passed before with exactly these versions installed.

    Importing torch + mmseg.models takes ~25 s on slow disks; this makes the no-op fast.
    A changed torch (ABI) or mmcv/mmseg/mmengine version invalidates the stamp.
    """
    try:
        return json.loads(_stamp_path().read_text()) == installed_versions()
    except (OSError, ValueError):
        return False


def write_stamp() -> None:
    path = _stamp_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(installed_versions()))


def check_and_stamp() -> tuple[bool, str]:
    """``check_installed``; when it passes, the stamp that lets the next run skip the check."""
    ok, msg = check_installed()
    if ok:
        write_stamp()
    return ok, msg


def torch_missing_error() -> str | None:
    """The one line to print when this Python cannot build or load mmcv's ops: mmcv's
    compiled extension is tied to the installed torch, so torch (ssl-bench) comes first."""
    if installed_versions()["torch"] is not None:
        return None
    return (f"error: torch is not installed in this Python ({sys.executable}); mmcv's compiled ops "
            "are built against it: install ssl-bench first (pip install -e .), then run "
            "bash scripts/install_mmcv.sh")


def wheel_has_ops(wheel: Path) -> bool:
    """True when the wheel carries mmcv's compiled extension (mmcv/_ext*.so)."""
    try:
        with zipfile.ZipFile(wheel) as zf:
            return any(re.fullmatch(r"mmcv/_ext[^/]*\.(so|pyd)", n) for n in zf.namelist())
    except (OSError, zipfile.BadZipFile):
        return False


def python_tag() -> str:
    return f"cp{sys.version_info.major}{sys.version_info.minor}"


def find_wheel(directory: Path | None) -> Path | None:
    if directory is None or not directory.is_dir():
        return None
    pattern = f"mmcv-{MMCV_VERSION}-{python_tag()}-{python_tag()}-*.whl"
    for wheel in sorted(directory.glob(pattern)):
        if wheel_has_ops(wheel):
            return wheel
        log(f"skipping {wheel}: built without mmcv's compiled ops (no mmcv/_ext*.so inside)")
    return None


def pip(python: str, *args: str, env: dict | None = None) -> None:
    cmd = [python, "-m", "pip", *args]
    log("$ " + " ".join(cmd))
    subprocess.run(cmd, check=True, env=env)


def patch_setup_py(setup_py: Path) -> int:
    """Raise every ``-std=c++14``/``-std=c++17`` to ``-std=c++20``; returns the count."""
    text = setup_py.read_text()
    new, n = re.subn(r"-std=c\+\+1[47]", "-std=c++20", text)
    if n == 0:
        raise RuntimeError(f"{setup_py}: no -std=c++14/17 flag found; is this mmcv {MMCV_VERSION}?")
    setup_py.write_text(new)
    return n


def build_wheel(out_dir: Path, dry_run: bool = False, keep: bool = False) -> Path | None:
    """Download the mmcv sdist, patch it and build a CPU wheel into ``out_dir``."""
    work = Path(tempfile.mkdtemp(prefix="mmcv-build-"))
    log(f"build directory {work}")
    try:
        venv = work / "venv"
        subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)],
                       check=True)
        vpy = str(venv / "bin" / "python")
        # setup.py imports pkg_resources; wheel provides bdist_wheel for setuptools < 70.1
        pip(vpy, "install", "--quiet", "setuptools<70", "wheel")
        # metadata preparation runs setup.py too, so the download also needs the old setuptools
        pip(vpy, "download", "--quiet", "--no-binary", "mmcv", "--no-deps",
            "--no-build-isolation", f"mmcv=={MMCV_VERSION}", "-d", str(work / "sdist"))
        sdist = next((work / "sdist").glob(f"mmcv-{MMCV_VERSION}.tar.gz"))
        with tarfile.open(sdist) as tar:
            tar.extractall(work, filter="data")
        src = work / f"mmcv-{MMCV_VERSION}"
        n = patch_setup_py(src / "setup.py")
        log(f"patched {n} -std flags to -std=c++20 in {src / 'setup.py'}")
        env = dict(os.environ, MMCV_WITH_OPS="1", FORCE_CUDA="0",
                   # a visible GPU would make setup.py build CUDA ops (needs nvcc)
                   CUDA_VISIBLE_DEVICES="",
                   MAX_JOBS=os.environ.get("MAX_JOBS", str(os.cpu_count() or 1)))
        out_dir.mkdir(parents=True, exist_ok=True)
        cmd = [vpy, "-m", "pip", "wheel", "--no-build-isolation", "--no-deps",
               "-w", str(out_dir), str(src)]
        if dry_run:
            log("dry run: would now run (about 30 min on 2 cores):")
            log("  MMCV_WITH_OPS=1 FORCE_CUDA=0 CUDA_VISIBLE_DEVICES= " + " ".join(cmd))
            keep = True
            return None
        log("compiling mmcv ops (about 30 min on 2 cores) ...")
        t0 = time.time()
        subprocess.run(cmd, check=True, env=env)
        log(f"compiled in {time.time() - t0:.0f} s")
        wheel = find_wheel(out_dir)
        if wheel is None:
            log(f"FAILED: pip wheel finished but {out_dir} holds no mmcv wheel with compiled ops")
        return wheel
    finally:
        if keep:
            log(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


def install(wheel: Path) -> None:
    pip(sys.executable, "install", str(wheel), f"mmsegmentation=={MMSEG_VERSION}",
        f"mmengine=={MMENGINE_VERSION}", *EXTRA_REQUIREMENTS)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--wheel-dir", type=Path, default=os.environ.get("MMCV_WHEEL_DIR"),
                        help="directory holding a prebuilt mmcv wheel (default: $MMCV_WHEEL_DIR)")
    parser.add_argument("--dry-run", action="store_true",
                        help="download and patch the sdist, print the build command, stop")
    parser.add_argument("--force", action="store_true", help="reinstall even if it works")
    parser.add_argument("--verify", action="store_true",
                        help="re-run the import check even when a matching stamp exists")
    parser.add_argument("--no-build", action="store_true",
                        help="fail instead of compiling when no prebuilt wheel is found")
    parser.add_argument("--keep-build-dir", action="store_true")
    args = parser.parse_args(argv)
    t0 = time.time()
    missing = torch_missing_error()
    if missing:
        print(missing, file=sys.stderr)
        return 2

    if not (args.force or args.dry_run):
        if not args.verify and stamp_matches():
            log(f"already installed and verified ({_stamp_path()}); nothing to do "
                f"[{time.time() - t0:.1f} s]")
            return 0
        ok, msg = check_and_stamp()
        if ok:
            log(f"already installed ({msg}); nothing to do [{time.time() - t0:.1f} s]")
            return 0
        log(f"not usable yet: {msg}")

    cache = cache_dir()
    if args.dry_run:
        build_wheel(cache, dry_run=True, keep=True)
        return 0

    candidates = [("MMCV_WHEEL_DIR", find_wheel(args.wheel_dir)), ("cache", find_wheel(cache))]
    for origin, wheel in candidates:
        if wheel is None:
            continue
        log(f"using prebuilt wheel from {origin}: {wheel}")
        install(wheel)
        ok, msg = check_and_stamp()
        if ok:
            log(f"done: {msg} [{time.time() - t0:.1f} s]")
            return 0
        # a wheel built against another torch fails to load its extension
        log(f"the wheel from {origin} does not work with this torch ({msg}); trying the next source")
        subprocess.run([sys.executable, "-m", "pip", "uninstall", "-y", "mmcv"], check=False)

    if args.no_build:
        log("no usable prebuilt wheel and --no-build given")
        return 1
    wheel = build_wheel(cache, keep=args.keep_build_dir)
    if wheel is None:
        return 1
    log(f"cached {wheel}")
    install(wheel)
    ok, msg = check_and_stamp()
    log(("done: " if ok else "FAILED: ") + f"{msg} [{time.time() - t0:.1f} s]")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
