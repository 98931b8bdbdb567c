"""scripts/install_mmcv.sh checks what it needs before it works, and the top-level command
takes the default run's flags."""
from __future__ import annotations

import subprocess
import venv
import zipfile
from pathlib import Path

import pytest

from harness.cli import build_parser, parse_command_line, split_top_level
from scripts import install_mmcv

REPO = Path(__file__).resolve().parents[1]


def test_without_torch_one_error_line_and_nonzero_exit(tmp_path):
    env_dir = tmp_path / "bare"
    venv.EnvBuilder(with_pip=False).create(env_dir)  # a Python that holds nothing
    python = env_dir / "bin" / "python"
    proc = subprocess.run(["bash", str(REPO / "scripts" / "install_mmcv.sh")], capture_output=True,
                          text=True, env={"PYTHON": str(python), "PATH": "/usr/bin:/bin"}, timeout=120)
    assert proc.returncode != 0
    lines = [line for line in (proc.stdout + proc.stderr).splitlines() if line.strip()]
    assert len(lines) == 1, lines
    assert lines[0].startswith("error: torch is not installed")
    assert "pip install -e ." in lines[0] and "Traceback" not in proc.stderr


def _wheel(path: Path, names: list[str]) -> Path:
    with zipfile.ZipFile(path, "w") as zf:
        for name in names:
            zf.writestr(name, b"")
    return path


def test_a_wheel_without_compiled_ops_is_named_and_skipped(tmp_path, capsys):
    tag = install_mmcv.python_tag()
    name = f"mmcv-{install_mmcv.MMCV_VERSION}-{tag}-{tag}-linux_x86_64.whl"
    _wheel(tmp_path / name, ["mmcv/__init__.py", "mmcv/ops/__init__.py"])
    assert install_mmcv.find_wheel(tmp_path) is None
    assert "built without mmcv's compiled ops" in capsys.readouterr().out
    with_ops = _wheel(tmp_path / name, ["mmcv/__init__.py", "mmcv/_ext.cpython-311-x86_64-linux-gnu.so"])
    assert install_mmcv.find_wheel(tmp_path) == with_ops


@pytest.mark.parametrize("argv, top, rest", [
    ([], [], []),
    (["--no-progress"], [], ["--no-progress"]),
    (["--threads", "2", "--pretrain", "--force"], ["--threads", "2", "--pretrain"], ["--force"]),
    (["--threads=2", "run", "x.yaml"], ["--threads=2"], ["run", "x.yaml"]),
])
def test_split_top_level(argv, top, rest):
    assert split_top_level(argv) == (top, rest)


def test_the_default_run_takes_run_flags_without_a_command():
    parser = build_parser()
    args = parse_command_line(parser, ["--threads", "1", "--no-progress", "--set", "protocols=[]"])
    assert args.command == "run" and args.no_progress and args.threads == 1
    assert args.set == ["protocols=[]"]
    assert parse_command_line(parser, ["eval", "--protocol", "knn", "--dataset", "synth",
                                       "--data-root", "d", "--random-init", "vit_tiny"]).command == "eval"


def test_an_unknown_flag_of_the_default_run_is_refused(capsys):
    with pytest.raises(SystemExit) as exc:
        parse_command_line(build_parser(), ["--no-such-flag"])
    assert exc.value.code == 2
    assert "--no-such-flag" in capsys.readouterr().err
