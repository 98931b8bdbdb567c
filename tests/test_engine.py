"""Pretraining engine: schedules, exact resume after SIGKILL, and torchrun (gloo)
equivalence with a single process at the same global batch."""
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml
from safetensors.torch import load_file

from harness.cli import main
from harness.training.engine import cosine_schedule
from tiny_recipes import TINY_DINO

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def tiny_data(synth_tiny):
    return synth_tiny


@pytest.fixture(scope="module")
def dino_six_steps(tmp_path_factory, tiny_data):
    """TINY_DINO for 6 steps in one process, run once: the reference of the torchrun and the
    iBOT-as-DINO checks, and the finished run the configuration check resumes from."""
    tmp = tmp_path_factory.mktemp("dino_six")
    cfg = tmp / "dino.yaml"
    cfg.write_text(yaml.safe_dump(TINY_DINO))
    r = _run(cfg, tiny_data, tmp / "out", sets=["train.max_steps=6"])
    assert r.returncode == 0, r.stderr
    return tmp / "out"


def _run(cfg_path, data, out, extra_env=None, launcher=None, sets=()):
    env = dict(os.environ, OMP_NUM_THREADS="1", **(extra_env or {}))
    cmd = (launcher or [sys.executable]) + [str(REPO / "run_benchmark.py"), "--threads", "1", "pretrain",
                                            str(cfg_path), "--data-root", str(data), "--out", str(out),
                                            "--no-progress"]
    for s in sets:
        cmd += ["--set", s]
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)


def _losses(out):
    return [json.loads(line)["loss"] for line in (Path(out) / "log.jsonl").read_text().splitlines()]


def test_cosine_schedule_matches_dino_definition():
    s = cosine_schedule(1.0, 0.0, total_steps=10, warmup_steps=2)
    assert s[0] == 0.0 and s[1] == 1.0  # linspace(0, base, warmup)
    assert np.isclose(s[2], 1.0) and s[-1] > 0 and np.all(np.diff(s[2:]) < 0)
    assert len(s) == 10


@pytest.mark.slow  # a pretraining killed and resumed: 14 s
def test_sigkill_then_resume_reaches_the_same_weights(tmp_path, tiny_data):
    cfg = tmp_path / "dino.yaml"
    cfg.write_text(yaml.safe_dump(TINY_DINO))
    full = _run(cfg, tiny_data, tmp_path / "full")
    assert full.returncode == 0, full.stderr
    killed = _run(cfg, tiny_data, tmp_path / "killed", {"SSL_BENCH_FAULT_KILL_AFTER_STEP": "5"})
    assert killed.returncode == -9  # SIGKILL
    assert not (tmp_path / "killed" / "backbone.safetensors").exists()
    resumed = _run(cfg, tiny_data, tmp_path / "killed")
    assert resumed.returncode == 0, resumed.stderr
    a = load_file(str(tmp_path / "full" / "backbone.safetensors"))
    b = load_file(str(tmp_path / "killed" / "backbone.safetensors"))
    assert a.keys() == b.keys()
    for k in a:
        assert (a[k] == b[k]).all(), k
    # the resumed log drops the rows after the checkpoint and continues the curve exactly
    assert _losses(tmp_path / "killed") == _losses(tmp_path / "full")


def test_resume_refuses_a_different_configuration(tmp_path, synth_tiny, capsys):
    cfg = tmp_path / "dino.yaml"
    cfg.write_text(yaml.safe_dump(TINY_DINO))
    # in process, the finished run too: a new interpreter would only add start-up (torch's import)
    run = ["pretrain", str(cfg), "--data-root", str(synth_tiny), "--out", str(tmp_path / "o"), "--no-progress",
           "--set", "train.max_steps=6"]
    assert main(run) == 0 and (tmp_path / "o" / "resume.pt").is_file()
    rc = main([*run, "--set", "train.lr=1e-3"])
    assert rc == 2 and "different configuration" in capsys.readouterr().err


# iBOT and SynCLR on the same tiny backbone: their distributed parts are the patch centre
# (averaged over ranks), per-sample masks (seeded by sample, not by rank) and, for SynCLR,
# the all-gathered EMA keys of the multi-positive loss with whole captions per process.
_TINY_HEAD = {"out_dim": 64, "hidden_dim": 64, "bottleneck_dim": 32, "use_bn_in_head": False}
_TINY_CROPS = {"global_crops_size": 32, "local_crops_number": 2, "local_crops_size": 16,
               "blur_p_global1": 0.0, "blur_p_global2": 0.0, "blur_p_local": 0.0}
TINY_IBOT = {**TINY_DINO, "method": {
    "name": "ibot", **_TINY_HEAD, "patch_out_dim": 64, "warmup_teacher_temp_epochs": 0,
    "warmup_teacher_temp": 0.04, "teacher_temp": 0.04,
    "warmup_teacher_patch_temp": 0.04, "teacher_patch_temp": 0.04, "pred_ratio": [0.0, 0.3],
    "pred_ratio_var": [0.0, 0.2], "crops": _TINY_CROPS}}
# SynCLR reads the 6 caption groups: batch 8 = 4 captions x 2 images, one step per epoch.
# Its masks are laid out per process (the official collate masks the first
# int(mask_probability x local batch) global crops), so with masking the two runs differ by
# design; without it the all-gathered contrastive keys and Sinkhorn-Knopp must agree.
TINY_SYNCLR = {**TINY_DINO, "train": {**TINY_DINO["train"], "epochs": 6}, "method": {
    "mask_probability": 0.0,
    "name": "synclr", "images_per_caption": 2, "contrast_mlp_dim": 32, "contrast_output_dim": 16,
    "dino_mlp_dim": 32, "dino_output_dim": 48, "dino_bottleneck_dim": 16, "warmup_teacher_temp_epochs": 0.0,
    "crops": {**_TINY_CROPS, "global_crops_number": 1, "global_recipe_order": "random"}}}


# Two torchrun processes per case (10 s or more each): the slow tests, which CI runs too.
@pytest.mark.slow
@pytest.mark.skipif(shutil.which("torchrun") is None, reason="torchrun not on PATH")
@pytest.mark.parametrize("name,recipe,port", [
    ("dino", TINY_DINO, 29517),
    ("ibot", TINY_IBOT, 29518),
    ("synclr", TINY_SYNCLR, 29519)])
def test_torchrun_two_processes_match_one_process(tmp_path, tiny_data, dino_six_steps, name, recipe, port):
    cfg = tmp_path / f"{name}.yaml"
    cfg.write_text(yaml.safe_dump(recipe))
    if name == "dino":
        one_out = dino_six_steps
    else:
        one_out = tmp_path / "one"
        one = _run(cfg, tiny_data, one_out, sets=["train.max_steps=6"])
        assert one.returncode == 0, one.stderr
    two = _run(cfg, tiny_data, tmp_path / "two", sets=["train.max_steps=6"],
               launcher=["torchrun", "--nproc_per_node=2", f"--master_port={port}"])
    assert two.returncode == 0, two.stderr + two.stdout
    l1, l2 = np.array(_losses(one_out)), np.array(_losses(tmp_path / "two"))
    assert len(l1) == len(l2) == 6
    # same global batch, same samples, averaged gradients: equal up to summation order
    np.testing.assert_allclose(l2, l1, rtol=1e-4, atol=1e-5)


@pytest.mark.slow  # end to end (seconds); CI runs it with the slow suite
def test_ibot_without_mim_masks_or_bn_trains_as_dino(tmp_path, tiny_data, dino_six_steps):
    """iBOT's [CLS] part is DINO: with its MIM loss and masking off and no BatchNorm in the head
    (the official head's BatchNorm spans every token), the same seed gives DINO's run. Not to the
    bit: iBOT projects the global and the local [CLS] tokens in two calls, DINO in one, and the
    matmul kernels may round rows differently by batch size."""
    ibot = {**TINY_IBOT, "method": {**TINY_IBOT["method"], "lambda2": 0.0, "use_masked_im_modeling": False}}
    cfg = tmp_path / "ibot.yaml"
    cfg.write_text(yaml.safe_dump(ibot))
    r = _run(cfg, tiny_data, tmp_path / "ibot", sets=["train.max_steps=6"])
    assert r.returncode == 0, r.stderr
    runs = {"dino": _losses(dino_six_steps), "ibot": _losses(tmp_path / "ibot")}
    assert len(runs["dino"]) == 6
    np.testing.assert_allclose(runs["ibot"], runs["dino"], rtol=1e-5)
    a = load_file(str(dino_six_steps / "backbone.safetensors"))
    b = load_file(str(tmp_path / "ibot" / "backbone.safetensors"))
    assert a.keys() == b.keys()
    for k in a:
        torch.testing.assert_close(b[k], a[k], rtol=1e-4, atol=1e-6)
