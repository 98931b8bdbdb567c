"""Install the OpenMMLab stack: mmseg for the ``seg_linear`` and ``segmenter`` protocols, mmdet
(with pycocotools) for ``detection``.

    python -m scripts.install_mmcv            # or: bash scripts/install_mmcv.sh
    python -m scripts.install_mmcv --dry-run  # download + patch the sdist, print the build command

mmsegmentation 1.2.2 and mmdet 3.3.0 both assert ``mmcv>=2.0.0rc4,<2.2.0`` and need mmcv's
compiled ops (mmdet's RoIAlign and NMS run in them).
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
   on 2 cores). Where a CUDA toolkit is present (``nvcc`` on the PATH or under
   ``$CUDA_HOME``, and torch built with CUDA that sees a GPU) the ops are built for CUDA
   too (``FORCE_CUDA=1``, cached apart as ``torch-<version>-cuda``): a CPU-only build cannot
   run RoIAlign / NMS on GPU tensors, and an installed CPU-only build is replaced there.

Then the wheel, mmsegmentation, mmdet, mmengine, pycocotools and their needs are installed into
this Python and ``import mmseg.models, mmdet.models`` is checked in a fresh interpreter. Nothing here imports mmcv,
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
MMDET_VERSION = "3.3.0"
# pycocotools: COCO box / mask AP (mmdet's CocoMetric); the `det` extra of pyproject.toml
DET_REQUIREMENTS = [f"mmdet=={MMDET_VERSION}", "pycocotools>=2.0.7"]
# ftfy/regex: mmseg.models imports its CLIP tokenizer; opencv 5 is newer than anything
# mmcv 2.1 was tested with, so keep 4.x.
EXTRA_REQUIREMENTS = ["ftfy", "regex", "opencv-python>=4,<5"]
INSTALL_COMMAND = "bash scripts/install_mmcv.sh  (or: python -m scripts.install_mmcv)"

_CHECK_SNIPPET = f"""
import os
import mmcv, mmengine, mmseg, mmdet
import mmcv.ops  # fails without the compiled extension
import mmseg.models, mmdet.models, pycocotools.cocoeval
want = {{'mmcv': {MMCV_VERSION!r}, 'mmengine': {MMENGINE_VERSION!r}, 'mmseg': {MMSEG_VERSION!r},
        'mmdet': {MMDET_VERSION!r}}}
have = {{'mmcv': mmcv.__version__, 'mmengine': mmengine.__version__, 'mmseg': mmseg.__version__,
        'mmdet': mmdet.__version__}}
bad = {{k: v for k, v in have.items() if v != want[k]}}
if bad:
    raise SystemExit(f'version mismatch: have {{bad}}, want {{want}}')
cuda_ops = mmcv.ops.get_compiling_cuda_version()
if os.environ.get('SSL_BENCH_WANT_CUDA_OPS') == '1' and cuda_ops == 'not available':
    raise SystemExit('mmcv ops built without CUDA, and a CUDA toolkit is present')
print('ok', have, 'cuda ops:', cuda_ops)
"""


def log(msg: str) -> None:
    print(f"[install_mmcv] {msg}", flush=True)


def check_installed(python: str = sys.executable) -> tuple[bool, str]:
    """(ok, message) from importing the stack in a fresh interpreter (where a CUDA toolkit is
    present, the ops must be CUDA ops)."""
    env = dict(os.environ, SSL_BENCH_WANT_CUDA_OPS="1" if cuda_toolkit_present() else "0")
    proc = subprocess.run([python, "-c", _CHECK_SNIPPET], capture_output=True, text=True, env=env)
    out = (proc.stdout + proc.stderr).strip()
    return proc.returncode == 0, out.splitlines()[-1] if out else ""


def installed_versions() -> dict[str, str | None]:
    """Distribution versions from package metadata (cheap: imports nothing)."""
    out = {}
    for dist in ("torch", "mmcv", "mmengine", "mmsegmentation", "mmdet", "pycocotools"):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[dist] = None
    return out


def cache_root() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "ssl-bench"


def nvcc_path() -> str | None:
    """nvcc on the PATH, else under $CUDA_HOME / $CUDA_PATH."""
    found = shutil.which("nvcc")
    if found:
        return found
    for var in ("CUDA_HOME", "CUDA_PATH"):
        candidate = Path(os.environ.get(var, "/nonexistent")) / "bin" / "nvcc"
        if candidate.is_file():
            return str(candidate)
    return None


_TORCH_CUDA_SNIPPET = "import torch; print(int(torch.version.cuda is not None and torch.cuda.is_available()))"


def cuda_toolkit_present(python: str = sys.executable) -> bool:
    """True where mmcv's ops can and must be built for CUDA: nvcc is there, and this torch is a
    CUDA build that sees a GPU ($SSL_BENCH_CUDA_OPS=0 / 1 overrides the probe)."""
    forced = os.environ.get("SSL_BENCH_CUDA_OPS")
    if forced in ("0", "1"):
        return forced == "1"
    if nvcc_path() is None:
        return False
    proc = subprocess.run([python, "-c", _TORCH_CUDA_SNIPPET], capture_output=True, text=True)
    return proc.returncode == 0 and proc.stdout.strip().endswith("1")


def build_env(cuda: bool) -> dict:
    """The environment of mmcv's setup.py: CPU ops only (no GPU visible, so setup.py does not
    reach for nvcc), or CUDA ops as well (FORCE_CUDA=1)."""
    env = dict(os.environ, MMCV_WITH_OPS="1",
               MAX_JOBS=os.environ.get("MAX_JOBS", str(os.cpu_count() or 1)))
    if cuda:
        env["FORCE_CUDA"] = "1"
    else:
        env.update(FORCE_CUDA="0", CUDA_VISIBLE_DEVICES="")
    return env


def cache_dir(cuda: bool = False) -> Path:
    tag = re.sub(r"[^A-Za-z0-9_.-]", "_", installed_versions()["torch"] or "none")
    return cache_root() / "wheels" / (f"torch-{tag}-cuda" if cuda else f"torch-{tag}")


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
        return json.loads(_stamp_path().read_text()) == stamp_content()
    except (OSError, ValueError):
        return False


def write_stamp() -> None:
    path = _stamp_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(stamp_content()))


def stamp_content() -> dict:
    """What the stamp is keyed by: the versions, and whether CUDA ops are required here."""
    return {**installed_versions(), "cuda_ops_required": cuda_toolkit_present()}


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


def build_wheel(out_dir: Path, dry_run: bool = False, keep: bool = False, cuda: bool = False) -> Path | None:
    """Download the mmcv sdist, patch it and build a wheel into ``out_dir`` (CPU ops; CUDA
    ops too when ``cuda``)."""
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
        env = build_env(cuda)
        flags = "MMCV_WITH_OPS=1 " + ("FORCE_CUDA=1" if cuda else "FORCE_CUDA=0 CUDA_VISIBLE_DEVICES=")
        out_dir.mkdir(parents=True, exist_ok=True)
        cmd = [vpy, "-m", "pip", "wheel", "--no-build-isolation", "--no-deps",
               "-w", str(out_dir), str(src)]
        if dry_run:
            log("dry run: would now run (about 30 min on 2 cores):")
            log(f"  {flags} " + " ".join(cmd))
            keep = True
            return None
        log(f"compiling mmcv ops ({'CPU and CUDA' if cuda else 'CPU'}; about 30 min on 2 cores) ...")
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
        f"mmengine=={MMENGINE_VERSION}", *DET_REQUIREMENTS, *EXTRA_REQUIREMENTS)


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

    cuda = cuda_toolkit_present()
    cache = cache_dir(cuda)
    if cuda:
        log("CUDA toolkit present: mmcv's ops are built for CUDA too (SSL_BENCH_CUDA_OPS=0 to skip)")
    if args.dry_run:
        build_wheel(cache, dry_run=True, keep=True, cuda=cuda)
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
    wheel = build_wheel(cache, keep=args.keep_build_dir, cuda=cuda)
    if wheel is None:
        return 1
    log(f"cached {wheel}")
    install(wheel)
    ok, msg = check_and_stamp()
    log(("done: " if ok else "FAILED: ") + f"{msg} [{time.time() - t0:.1f} s]")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
