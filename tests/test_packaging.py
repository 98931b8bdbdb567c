"""The package as a user installs it: every shipped file (configs/, results/paper/) is in the
wheel, found through the package rather than the checkout, and a wheel installed in a fresh
environment runs from a folder outside the checkout."""
from __future__ import annotations

import os
import shutil
import site as pysite
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from harness.errors import ConfigError
from harness.paths import PACKAGE_DIR, PACKAGED_DATA, SHIPPED_FOLDERS, shipped
from harness.presets import load_presets

REPO = Path(__file__).resolve().parent.parent
CODE_PACKAGES = ("harness", "methods", "benchmarks")


def _files(folder: Path) -> set[Path]:
    return {p.relative_to(folder) for p in folder.rglob("*")
            if p.is_file() and "__pycache__" not in p.parts and not p.name.startswith(".")}


def _build_py(monkeypatch):
    """setuptools' build_py for pyproject.toml, finalized but not run: what a wheel would hold."""
    from setuptools.config.pyprojecttoml import apply_configuration
    from setuptools.dist import Distribution

    monkeypatch.chdir(REPO)  # the package-dir paths are relative to the project
    dist = Distribution({"script_name": "setup.py"})  # what a PEP 517 build names it
    apply_configuration(dist, "pyproject.toml")
    # package-data patterns only: the manifest would add files, never remove one
    dist.include_package_data = False
    cmd = dist.get_command_obj("build_py")
    cmd.ensure_finalized()
    return cmd


def test_the_wheel_lists_every_shipped_file_and_every_module(monkeypatch):
    cmd = _build_py(monkeypatch)
    in_wheel = {Path(build_dir).relative_to(cmd.build_lib) / name
                for _, _, build_dir, names in cmd.data_files for name in names}
    in_wheel |= {Path(*package.split("."), f"{module}.py") for package, module, _ in cmd.find_all_modules()}
    # the installed layout shipped() reads: harness/_shipped/<the path in the repository>
    packaged = PACKAGED_DATA.relative_to(PACKAGE_DIR.parent)
    want = {packaged / folder / rel for folder in SHIPPED_FOLDERS for rel in _files(REPO / folder)}
    # a protocol folder's tests/ is test code, not shipped
    want |= {Path(top) / rel for top in CODE_PACKAGES for rel in _files(REPO / top)
             if rel.suffix == ".py" and "tests" not in rel.parts}
    # a protocol folder's presets and paper tables: read at run time
    want |= {Path("benchmarks") / rel for rel in _files(REPO / "benchmarks") if rel.parent.name in ("presets", "paper")}
    # data files beside the code (templates, the HTML pages' script and style), wherever they sit
    want |= {Path("harness") / rel for rel in _files(REPO / "harness") if rel.suffix not in {".py", ".pyc"}}
    want.add(Path("run_benchmark.py"))  # the console script's module
    missing = sorted(map(str, want - in_wheel))
    assert not missing, (f"files the wheel would leave out: {missing}; list their package in "
                         f"[tool.setuptools] packages or their pattern in package-data (pyproject.toml)")


def test_shipped_paths_are_the_checkouts_in_a_checkout():
    assert not PACKAGED_DATA.exists()  # a checkout never holds the installed copy
    assert shipped("configs") == REPO / "configs" and shipped("results/paper/dino_imagenet.csv").is_file()
    with pytest.raises(ValueError, match="not under a shipped folder"):
        shipped("tests/fixtures")


def test_no_preset_is_an_error_never_an_empty_set(tmp_path):
    with pytest.raises(ConfigError, match="no preset folder"):
        load_presets("linear", tmp_path / "absent")
    (tmp_path / "knn_a.yaml").write_text("protocol: knn\npreset: a\nvalues: {k: 1}\n")
    with pytest.raises(ConfigError, match="no preset of protocol 'linear'"):
        load_presets("linear", tmp_path)


# What the installed package must do from a folder outside the checkout: the configs are the
# package's copy, every preset set loads, every shipped suite resolves by its short name.
_CHECK_INSTALLED = """
import harness, harness.config, harness.paths
from harness.registry import PROTOCOLS
print(harness.__file__)
print(harness.config.CONFIG_ROOT)
assert harness.paths.source_checkout() is None
linear = PROTOCOLS.get("linear")
assert linear.from_preset("ibot").cfg.base_lrs == linear.PRESETS["ibot"]["base_lrs"]
dense = PROTOCOLS.get("dense_nn")
assert {"cribo", "hbird", "hbird_synth"} <= set(dense.PRESETS)
for preset in dense.PRESETS:
    dense.from_preset(preset)
for name in ("knn", "seg_linear", "segmenter"):
    assert PROTOCOLS.get(name).PRESETS, name
from harness.running.suite import load_suite
suites = sorted((harness.config.CONFIG_ROOT / "suites").glob("*.yaml"))
assert suites
for path in suites:
    load_suite(f"suites/{path.name}")  # by the name a user gives, found among the shipped configs
print("configs ok")
"""

# A user's own suite in the working folder, with a shipped method config.
_SUITE = """
synth: {preset: tiny, seed: 0, root: synth}
models:
  - name: random_init
    random_init: {arch: vit_cpu_tiny, seed: 0}
  - name: dino
    pretrain: methods/dino_cpu.yaml
    set: [train.epochs=1, train.max_steps=2, train.batch_size=8, train.num_workers=0,
          method.crops.local_crops_number=0]
protocols:
  - name: knn
    preset: synth
    dataset: imagefolder
    data_root: "{synth}/imagenet"
    set: {ks: [3], progress: false}
"""


def _copy_sources(dst: Path) -> Path:
    """The project without its tests, docs and generated files: a build must not need them
    (and the build's own outputs stay out of the checkout)."""
    skip_top = {"tests", "docs", "experiments", "scripts", "build", "dist"}

    def ignore(folder: str, names: list[str]) -> set[str]:
        here = Path(folder).resolve()
        return {n for n in names if n == "__pycache__" or n.endswith(".egg-info")
                or (here == REPO and (n in skip_top or n.startswith(".")))
                or (here == REPO / "results" and n != "paper")}

    return Path(shutil.copytree(REPO, dst, ignore=ignore))


def _ok(args: list, timeout: int = 300, **kwargs) -> str:
    out = subprocess.run([str(a) for a in args], capture_output=True, text=True, timeout=timeout, **kwargs)
    assert out.returncode == 0, f"{args}: exit {out.returncode}\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}"
    return out.stdout


@pytest.mark.slow
def test_the_wheel_runs_outside_the_checkout(tmp_path):
    src = _copy_sources(tmp_path / "src")
    dist = tmp_path / "dist"
    _ok([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-q", src,
         "-w", dist])
    wheel, = dist.glob("ssl_bench-*.whl")

    # torch and the other dependencies come from this interpreter's site-packages; the wheel
    # goes into the venv's own, which comes first on sys.path. When this interpreter is itself a
    # venv, --system-site-packages would reach only the base interpreter's: a .pth adds ours.
    venv = tmp_path / "venv"
    _ok([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", venv])
    py, bench = venv / "bin" / "python", venv / "bin" / "ssl-bench"
    site = Path(_ok([py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]).strip()).resolve()
    assert site != Path(sysconfig.get_paths()["purelib"])
    if sys.prefix != sys.base_prefix:
        (site / "outer_site.pth").write_text("".join(f"import site; site.addsitedir({d!r})\n"
                                                     for d in pysite.getsitepackages()))
    # --force-reinstall: pip sees the checkout's editable install, outside the venv and left
    # alone, as the same version already installed
    _ok([py, "-m", "pip", "install", "--no-deps", "--no-index", "--force-reinstall", "-q", wheel])

    work = tmp_path / "work"  # outside the checkout: nothing here is on the import path
    work.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "SSL_BENCH_RESULTS")}
    env.update(SSL_BENCH_HOME=str(tmp_path / "home"), OMP_NUM_THREADS="1")

    def run(*args, timeout: int = 300) -> str:
        return _ok(list(args), timeout, cwd=work, env=env)

    harness_file, config_root, ok = run(py, "-c", _CHECK_INSTALLED).splitlines()[-3:]
    assert Path(harness_file).is_relative_to(site), f"imported {harness_file}, not the wheel in {site}"
    assert Path(config_root) == site / "harness" / "_shipped" / "configs" and ok == "configs ok"

    assert "dino_vits16" in run(bench, "zoo", "list")
    assert "dino_vits16" in run(bench, "reproduce", "dino-imagenet", "--dry-run")

    (work / "my_suite.yaml").write_text(_SUITE)
    out = run(bench, "run", "my_suite.yaml", "--no-progress", timeout=600)
    assert f"({site / 'harness' / '_shipped' / 'configs' / 'methods' / 'dino_cpu.yaml'})" in out, out[-3000:]
    assert "random_init" in out
    records = list((work / "results" / "runs").rglob("*.json"))  # an installed package writes here
    assert len(records) >= 2, out[-3000:]
    assert not (site / "results").exists()
