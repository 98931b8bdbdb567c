"""Inputs that could give a silently wrong or misleading number: each is refused with one clear
error (exit code 2, no record) or read correctly."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml
from PIL import Image

from harness.models.backbone import create_backbone
from harness.models.checkpoints import load_backbone, save_checkpoint
from harness.cli import main
from harness.data.classification import ImageFolderDataset
from harness.data.io import load_rgb
from harness.errors import CheckpointError, DataError, FolderLockedError
from harness.io_utils import FolderLock
from tiny_recipes import TINY_DINO

REPO = Path(__file__).resolve().parent.parent


def _no_records(home: Path) -> bool:
    runs = home / "results" / "runs"
    return not runs.exists() or not any(runs.iterdir())


def _cli(args, capsys):
    rc = main(["--threads", "1", *args])
    return rc, capsys.readouterr().err


def _tiny_checkpoint(stem: Path) -> Path:
    bb = create_backbone("vit_cpu_tiny", depth=1)
    return save_checkpoint(stem, bb.backbone_state_dict(), {"method": "dino", "arch": "vit_cpu_tiny",
                                                            "arch_kwargs": bb.arch_kwargs})


# ----------------------------------------------------------------------------- --checkpoint FILE.pth
def test_a_pth_beside_a_harness_checkpoint_is_refused_not_swapped(isolated_home, synth_tiny, capsys):
    """model.pth with model.safetensors + model.json beside it: loading the .safetensors would
    measure another file than the one named, and the record would name model.pth."""
    _tiny_checkpoint(isolated_home / "model")
    torch.save({"teacher": {}}, isolated_home / "model.pth")
    rc, err = _cli(["eval", "--protocol", "knn", "--preset", "synth", "--dataset", "imagefolder",
                    "--data-root", str(synth_tiny / "imagenet"), "--checkpoint", str(isolated_home / "model.pth"),
                    "--set", "progress=false"], capsys)
    assert rc == 2 and err.startswith("error: ") and err.count("\n") == 1, err
    assert "model.pth" in err and "zoo convert" in err and "zoo import" in err
    assert _no_records(isolated_home)


@pytest.mark.parametrize("name", ["model.pth", "model.ckpt"])
def test_an_official_file_alone_names_no_file_the_user_did_not_pass(tmp_path, name):
    torch.save({"model": {}}, tmp_path / name)
    with pytest.raises(CheckpointError) as exc:
        load_backbone(tmp_path / name)
    msg = str(exc.value)
    assert name in msg and "zoo convert" in msg and "model.safetensors" not in msg and "model.json" not in msg
    with pytest.raises(CheckpointError, match="no such file") as exc:  # a .pth that is not there either
        load_backbone(tmp_path / "other.pth")
    assert "other.safetensors" not in str(exc.value)


def test_harness_checkpoints_load_by_any_of_their_names(tmp_path):
    weights = _tiny_checkpoint(tmp_path / "model")
    for path in (weights, tmp_path / "model.json", tmp_path / "model"):
        _, meta = load_backbone(path)
        assert meta["arch"] == "vit_cpu_tiny"


# ----------------------------------------------------------------------------- 16-bit images
def test_16_bit_grayscale_png_is_scaled_not_clipped(tmp_path):
    values = np.random.default_rng(0).integers(0, 65536, (20, 30), dtype=np.uint16)
    Image.fromarray(values).save(tmp_path / "deep.png")
    assert Image.open(tmp_path / "deep.png").mode.startswith("I")
    rgb = np.asarray(load_rgb(tmp_path / "deep.png"))
    assert rgb.shape == (20, 30, 3) and rgb.dtype == np.uint8
    for c in range(3):
        np.testing.assert_array_equal(rgb[..., c], (values >> 8).astype(np.uint8))
    # the same picture stored with 8 bits reads the same
    Image.fromarray((values >> 8).astype(np.uint8)).save(tmp_path / "shallow.png")
    np.testing.assert_array_equal(np.asarray(load_rgb(tmp_path / "shallow.png")), rgb)


def test_16_bit_png_through_a_dataset_reader(tmp_path):
    """Readers decode through the one shared function."""
    (tmp_path / "train" / "a").mkdir(parents=True)
    values = np.full((16, 16), 40000, np.uint16)
    Image.fromarray(values).save(tmp_path / "train" / "a" / "x.png")
    img = ImageFolderDataset(tmp_path, "train").load_image(0)
    assert img.mode == "RGB" and np.asarray(img).max() == 40000 >> 8


def test_float_images_are_refused(tmp_path):
    Image.fromarray(np.random.default_rng(0).random((8, 8), dtype=np.float32)).save(tmp_path / "f.tiff")
    with pytest.raises(DataError, match=r"f\.tiff.*mode 'F'"):
        load_rgb(tmp_path / "f.tiff")


# ----------------------------------------------------------------------------- concurrent pretraining
def test_a_second_pretraining_into_a_locked_out_dir_fails_at_once(tmp_path, synth_tiny, capsys):
    cfg = tmp_path / "dino.yaml"
    cfg.write_text(yaml.safe_dump(TINY_DINO))
    out = tmp_path / "out"
    with FolderLock(out, "pretraining"):  # the run already going into --out
        rc, err = _cli(["pretrain", str(cfg), "--data-root", str(synth_tiny), "--out", str(out),
                        "--no-progress", "--set", "train.max_steps=1"], capsys)
    assert rc == 2 and err.startswith("error: ") and err.count("\n") == 1, err
    assert f"pid {os.getpid()}" in err and "started" in err and "host" in err
    assert not (out / "log.jsonl").exists() and not (out / "backbone.safetensors").exists()


def test_the_lock_goes_with_its_holder(tmp_path):
    """Released on exit and when the holder dies (kill -9 included): no stale lock to clear."""
    with FolderLock(tmp_path, "pretraining"):
        with pytest.raises(FolderLockedError, match=f"pid {os.getpid()}"):
            FolderLock(tmp_path).acquire()
    FolderLock(tmp_path).acquire().release()
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys; from harness.io_utils import FolderLock; "
         f"FolderLock({str(tmp_path)!r}).acquire(); print('held', flush=True); sys.stdin.read()"],
        cwd=REPO, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(FolderLockedError, match=f"pid {holder.pid}"):
            FolderLock(tmp_path).acquire()
    finally:
        holder.kill()
        holder.wait()
    FolderLock(tmp_path).acquire().release()


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("torchrun") is None, reason="torchrun not on PATH")
@pytest.mark.xdist_group("torchrun_port_29531")  # one master port: never two at once
def test_a_locked_out_dir_stops_every_torchrun_rank(tmp_path, synth_tiny):
    """Only the main process takes the lock; the others learn of the refusal and stop too
    instead of waiting in a collective."""
    cfg = tmp_path / "dino.yaml"
    cfg.write_text(yaml.safe_dump(TINY_DINO))
    out = tmp_path / "out"
    cmd = ["torchrun", "--nproc_per_node=2", "--master_port=29531", str(REPO / "run_benchmark.py"),
           "--threads", "1", "pretrain", str(cfg), "--data-root", str(synth_tiny), "--out", str(out),
           "--no-progress", "--set", "train.max_steps=1"]
    with FolderLock(out, "pretraining"):
        run = subprocess.run(cmd, env=dict(os.environ, OMP_NUM_THREADS="1"), capture_output=True, text=True,
                             timeout=300)
    assert run.returncode != 0 and f"pid {os.getpid()}" in run.stderr, run.stderr[-2000:]
    assert not (out / "log.jsonl").exists()
