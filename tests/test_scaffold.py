import importlib.util
import sys

import pytest

from harness.cli import main
from harness.conformance import check_method
from harness.errors import ConfigError
from harness.scaffold import new_method


def test_new_method_scaffold_passes_conformance(tmp_path, synth_tiny, isolated_home, capsys):
    assert main(["new-method", "toy_distill", "--root", str(tmp_path)]) == 0
    module_path = tmp_path / "methods" / "toy_distill.py"
    for p in (module_path, tmp_path / "configs/methods/toy_distill_cpu.yaml",
              tmp_path / "tests/test_method_toy_distill.py"):
        assert p.is_file()
    spec = importlib.util.spec_from_file_location("toy_distill_plugin", module_path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses look their module up there
    spec.loader.exec_module(mod)  # registers "toy_distill"
    try:
        report = check_method(tmp_path / "configs/methods/toy_distill_cpu.yaml", synth_tiny, protocols=False)
        assert report["losses"][-1] < report["losses"][0]
    finally:
        from harness.registry import METHODS

        METHODS._items.pop("toy_distill", None)
        sys.modules.pop(spec.name, None)


def test_new_method_refuses_bad_or_taken_names(tmp_path):
    with pytest.raises(ConfigError, match="lower-case Python identifier"):
        new_method("My-Method", tmp_path)
    with pytest.raises(ConfigError, match="already registered"):
        new_method("dino", tmp_path)
    new_method("fresh", tmp_path)
    with pytest.raises(ConfigError, match="would overwrite"):
        new_method("fresh", tmp_path)


# ----------------------------------------------------------------------------- new-protocol
REPO = __import__("pathlib").Path(__file__).resolve().parent.parent


def _project_copy(root):
    """A project folder that shares the checkout's code through links, with a benchmarks/ of its
    own (links to each protocol folder) and its own pyproject.toml, for the scaffold to write into."""
    import shutil

    for name in ("harness", "methods", "configs", "results", "tests", "run_benchmark.py"):
        (root / name).symlink_to(REPO / name)
    (root / "benchmarks").mkdir()
    for entry in (REPO / "benchmarks").iterdir():
        if entry.name != "__pycache__":
            (root / "benchmarks" / entry.name).symlink_to(entry)
    (root / "benchmarks" / "__init__.py").unlink()
    shutil.copy(REPO / "benchmarks" / "__init__.py", root / "benchmarks" / "__init__.py")
    shutil.copy(REPO / "pyproject.toml", root / "pyproject.toml")
    return root


def test_new_protocol_writes_one_folder_and_lists_its_package(tmp_path, capsys):

    root = _project_copy(tmp_path)
    before = (root / "pyproject.toml").read_text()
    assert main(["new-protocol", "scaffold_selftest", "--root", str(root)]) == 0
    written = {p.relative_to(root).as_posix() for p in map(__import__("pathlib").Path, (
        line.split("wrote ", 1)[1] for line in capsys.readouterr().out.splitlines() if line.startswith("wrote ")))}
    outside = {p for p in written if not p.startswith("benchmarks/scaffold_selftest/")}
    assert outside == {"pyproject.toml"}  # the one file outside the folder
    assert '"benchmarks.scaffold_selftest"' in (root / "pyproject.toml").read_text()
    assert (root / "pyproject.toml").read_text().replace(', "benchmarks.scaffold_selftest"', "") == before
    # its declaration reads torch-free beside the built-in ones, with a lower-is-better headline
    import os
    import subprocess

    probe = ("import sys, benchmarks; from harness.registry import read_declarations; "
             "d = read_declarations([benchmarks]); "
             "print(sorted(d), d['scaffold_selftest'].metric('rmse').higher_is_better, 'torch' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", probe], cwd=root, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(root)})
    assert done.returncode == 0, done.stderr[-2000:]
    names, higher, torch_loaded = done.stdout.rsplit(" ", 2)
    assert {"'knn'", "'dense_nn'", "'scaffold_selftest'"} <= set(names.strip("[]").split(", "))
    assert (higher, torch_loaded.strip()) == ("False", "False")


def test_new_protocol_refuses_bad_or_taken_names(tmp_path):
    from harness.scaffold import new_protocol

    root = _project_copy(tmp_path)
    with pytest.raises(ConfigError, match="lower-case Python identifier"):
        new_protocol("Depth-Probe", root)
    with pytest.raises(ConfigError, match="already registered"):
        new_protocol("knn", root)


@pytest.mark.slow
def test_a_scaffolded_protocol_passes_its_own_tests(tmp_path):
    """The generated folder's tests, run as a user would after `ssl-bench new-protocol`."""
    import os
    import subprocess

    root = _project_copy(tmp_path)
    assert main(["new-protocol", "scaffold_selftest", "--root", str(root)]) == 0
    env = {**os.environ, "PYTHONPATH": str(root), "SSL_BENCH_HOME": str(tmp_path / "home")}
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--rootdir", str(root),
                           str(root / "benchmarks" / "scaffold_selftest")], cwd=root, env=env, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert "2 passed" in done.stdout
