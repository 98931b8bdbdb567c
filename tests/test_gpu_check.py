"""scripts/gpu_check.sh as a dry run on the CPU (both sides on the CPU): every check runs and
passes, so the script a GPU machine runs is known to work before a GPU is lent."""
import json
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


@pytest.mark.slow
def test_gpu_check_dry_run_on_cpu(tmp_path):
    out = tmp_path / "summary.json"
    r = subprocess.run(["bash", str(REPO / "scripts" / "gpu_check.sh"), "--device", "cpu", "--steps", "3",
                        "--compare-steps", "2", "--out", str(out)], capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    summary = json.loads(out.read_text())
    assert summary["passed"] and summary["device"]["device"] == "cpu"
    names = [c["check"] for c in summary["checks"]]
    for method in ("dino", "ibot", "cribo", "synclr"):
        assert f"{method}: fp32 losses on cpu vs cpu" in names and f"{method}: 3 steps in fp32 on cpu" in names
    for protocol in ("features: cls", "knn: top1", "dense_nn: mIoU", "linear: top1"):
        assert any(n.startswith(protocol) for n in names)
