"""'finetune' on SynthScenes tiny: it trains and reports last / best top-1, a run stopped mid-epoch and
resumed reaches the numbers of an uninterrupted one, its checkpoint is read by another protocol, and
bad input is one error line with no record."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from harness.cli import main
from harness.errors import ConfigError
from harness.models.handle import ModelHandle
from harness.protocol_info import build_protocol


pytestmark = pytest.mark.usefixtures("one_torch_thread")

# 24 train images in batches of 8 (3 steps an epoch), 2 micro-batches of 4 per step: every piece of
# the recipe on (layer decay, mixup + cutmix, RandAugment, erasing, drop path, EMA, mean pooling)
TINY = dict(dataset="imagefolder", input_size=64, imagenet_default_mean_and_std=True, epochs=2, batch_size=8,
            update_freq=2, lr=1e-3, warmup_epochs=1, layer_decay=0.75, drop_path=0.1, mixup=0.8, cutmix=1.0,
            model_ema=True, model_ema_decay=0.9, eval_batch_size=64, progress=False)


@pytest.fixture(scope="module")
def root(synth_tiny):
    return synth_tiny / "imagenet"  # the session's SynthScenes tiny, read only


def _model():
    return ModelHandle.random_init("vit_cpu_tiny", seed=0, depth=2)


def _run(root, results: Path, monkeypatch, **values):
    monkeypatch.setenv("SSL_BENCH_RESULTS", str(results))
    protocol = build_protocol("finetune", None, {**TINY, **values})
    return protocol.run(_model(), root)[0]


def test_a_run_stopped_mid_epoch_and_resumed_gives_the_uninterrupted_numbers(root, tmp_path, monkeypatch):
    whole = _run(root, tmp_path / "a", monkeypatch)
    assert [r["epoch"] for r in whole.params["history"]] == [0, 1] and whole.params["steps"] == 6
    assert whole.metrics["top1_best"] == max(r["top1"] for r in whole.params["history"])
    assert whole.metrics["top1"] == whole.params["history"][-1]["top1"]
    assert whole.metrics["top1_ema_best"] == max(r["top1_ema"] for r in whole.params["history"])
    assert whole.metrics["top1_ema"] == whole.params["history"][-1]["top1_ema"]
    stopped = _run(root, tmp_path / "b", monkeypatch, max_steps=4)  # step 4 of 6: inside the second epoch
    assert stopped.params["steps"] == 4 and not stopped.params["resumed"]
    resumed = _run(root, tmp_path / "b", monkeypatch)
    assert resumed.params["resumed"] and resumed.params["steps"] == 6
    assert [t["from_step"] for t in resumed.params["trained_on"]] == [0, 4]
    for key in ("top1", "top1_best", "top5"):
        assert resumed.metrics[key] == pytest.approx(whole.metrics[key], abs=1e-9)
    for a, b in zip(whole.params["history"], resumed.params["history"]):
        assert a["loss"] == pytest.approx(b["loss"], rel=1e-5) and a["top1_ema"] == b["top1_ema"]
        assert a["train_loss"] == pytest.approx(b["train_loss"], rel=1e-5)
    w_whole, w_resumed = load_file(whole.artifacts["checkpoint"]), load_file(resumed.artifacts["checkpoint"])
    assert w_whole.keys() == w_resumed.keys()
    for k in w_whole:
        torch.testing.assert_close(w_resumed[k], w_whole[k], rtol=1e-5, atol=1e-6)
    again = _run(root, tmp_path / "b", monkeypatch)  # the resume file of a finished run: evaluated, not retrained
    assert again.params["steps"] == 6 and len(again.params["history"]) == 2
    assert again.metrics == pytest.approx(resumed.metrics, abs=1e-9)
    start = _model().backbone.state_dict()["blocks.0.attn.qkv.weight"]
    assert not torch.equal(w_whole["blocks.0.attn.qkv.weight"], start)  # the backbone was trained


def test_a_resume_file_of_another_recipe_is_refused(root, tmp_path, monkeypatch):
    _run(root, tmp_path / "a", monkeypatch, max_steps=1, save_checkpoint=False)
    written = next((tmp_path / "a").rglob("resume.pt"))
    with pytest.raises(ConfigError, match="another recipe"):
        _run(root, tmp_path / "b", monkeypatch, lr=2e-3, resume=str(written), max_steps=1)


def test_a_training_subset_restricts_the_train_split(root, tmp_path, monkeypatch):
    names = sorted(p.name for p in (root / "train").rglob("*.jpg"))[:16]
    listing = tmp_path / "sixteen.txt"
    listing.write_text("\n".join(names) + "\n")
    out = _run(root, tmp_path / "r", monkeypatch, train_subset=str(listing), epochs=1, save_checkpoint=False)
    assert out.params["n_train"] == 16 and out.params["steps"] == 2 and out.params["train_subset"] == "sixteen"
    whole = build_protocol("finetune", None, TINY)
    assert build_protocol("finetune", None, {**TINY, "train_subset": str(listing)}).fingerprint() != whole.fingerprint()


def test_data_parallel_on_one_process_gives_the_single_process_numbers(root, tmp_path, monkeypatch):
    import torch.distributed as tdist

    alone = _run(root, tmp_path / "a", monkeypatch, epochs=1, model_ema=False)
    tdist.init_process_group("gloo", init_method=f"file://{tmp_path / 'rdzv'}", rank=0, world_size=1)
    try:
        wrapped = _run(root, tmp_path / "b", monkeypatch, epochs=1, model_ema=False)
    finally:
        tdist.destroy_process_group()
    assert wrapped.params["world_size"] == 1 and wrapped.metrics == pytest.approx(alone.metrics, abs=1e-9)
    a, b = load_file(alone.artifacts["checkpoint"]), load_file(wrapped.artifacts["checkpoint"])
    for k in a:
        torch.testing.assert_close(b[k], a[k], rtol=1e-5, atol=1e-6)


def test_the_effective_batch_is_the_fingerprint_and_accumulation_the_record(root):
    one = build_protocol("finetune", None, {**TINY, "update_freq": 1})
    two = build_protocol("finetune", None, {**TINY, "update_freq": 2})
    assert one.fingerprint() == two.fingerprint()
    assert build_protocol("finetune", None, {**TINY, "batch_size": 12}).fingerprint() != one.fingerprint()


def _cli(args, capsys):
    rc = main(["--threads", "1", *args])
    return rc, capsys.readouterr().err


def _eval(root, model_args, sets, capsys):
    args = ["eval", "--protocol", "finetune", "--dataset", "imagefolder", "--data-root", str(root), *model_args]
    for k, v in {**TINY, **sets}.items():
        if k != "dataset":
            args += ["--set", f"{k}={v}"]
    return _cli(args, capsys)


def _no_records(home: Path) -> bool:
    runs = home / "results" / "runs"
    return not runs.exists() or not any(runs.rglob("*.json"))


@pytest.mark.parametrize("case", ["batch", "split", "blocks", "resume", "ra_epoch", "head"])
def test_bad_input_is_one_error_line_and_no_record(case, root, isolated_home, capsys):
    model_args, sets, expected = ["--random-init", "vit_cpu_tiny"], {}, ""
    data = root
    if case == "batch":  # 8 images a step cannot be cut into 3 micro-batches
        sets, expected = {"update_freq": 3}, "cannot be reached with update_freq 3"
    elif case == "split":
        sets, expected = {"val_split": "test"}, "needs the 'test' split"
    elif case == "blocks":
        model_args, expected = ["--model", "timm:resnet18,weights=random"], "layer_decay=1.0"
    elif case == "ra_epoch":  # RASampler keeps floor(24 / 256) x 256 = 0 entries an epoch
        sets, expected = {"repeated_aug": True}, "fewer than one effective batch"
    elif case == "head":  # an image folder states no official head
        sets, expected = {"head_outputs": "reader_official"}, "official_num_outputs"
    else:
        foreign = isolated_home / "resume.pt"
        torch.save({"identity": "0" * 40}, foreign)
        sets, expected = {"resume": str(foreign)}, "another recipe"
    rc, err = _eval(data, model_args, sets, capsys)
    assert rc == 2 and err.startswith("error: ") and err.count("\n") == 1, err
    assert expected in err, err
    assert _no_records(isolated_home)


@pytest.mark.slow
def test_the_finetuned_checkpoint_is_read_by_another_protocol(root, isolated_home, capsys):
    rc, err = _eval(root, ["--random-init", "vit_cpu_tiny"], {"epochs": 1, "model_ema": False}, capsys)
    assert rc == 0, err
    checkpoint = next((isolated_home / "results" / "runs" / "finetune").rglob("finetuned.safetensors"))
    meta = ModelHandle.from_checkpoint(checkpoint).meta
    assert meta["finetune"]["steps"] == 3 and meta["finetune"]["from"]["method"] == "random_init"
    copy = isolated_home / "ft" / "model.safetensors"
    copy.parent.mkdir()
    shutil.copy(checkpoint, copy)
    shutil.copy(checkpoint.with_suffix(".json"), copy.with_suffix(".json"))
    rc, err = _cli(["eval", "--protocol", "knn", "--preset", "synth", "--dataset", "imagefolder", "--data-root",
                    str(root), "--checkpoint", str(copy), "--set", "progress=false"], capsys)
    assert rc == 0, err
    records = [p for p in (isolated_home / "results" / "runs").glob("*.json")]
    knn = [p for p in records if '"name": "knn"' in p.read_text()]
    assert knn and str(copy) in knn[0].read_text()


@pytest.fixture(scope="module")
def synth_small():
    """SynthScenes small (the preset's set), generated once under the user's cache as the suites do."""
    from harness.data.synthetic import default_root, generate

    return generate(default_root("small", 0), preset="small", seed=0, progress=False) / "imagenet"


@pytest.mark.slow
def test_the_synth_preset_runs_end_to_end(synth_small, isolated_home, capsys):
    rc, err = _cli(["eval", "--protocol", "finetune", "--preset", "synth", "--dataset", "imagefolder", "--data-root",
                    str(synth_small), "--model", "zoo:synth_supervised", "--set", "progress=false"], capsys)
    assert rc == 0, err
    import json

    record = json.loads(next((isolated_home / "results" / "runs").glob("*.json")).read_text())
    params, metrics = record["protocol"]["params"], record["metrics"]
    assert params["steps"] == 3 * 37 and [r["epoch"] for r in params["history"]] == [0, 1, 2]
    assert metrics["top1_best"] == max(r["top1"] for r in params["history"]) >= metrics["top1"]
    assert 0.0 <= record["cost"]["data_wait_share"] <= 1.0
    # the supervised checkpoint learns the textures within the minute: well above the 8.3 of chance
    assert metrics["top1_best"] > 15.0


@pytest.mark.slow
def test_a_run_killed_mid_epoch_resumes_to_the_uninterrupted_numbers(root, tmp_path, monkeypatch):
    import os
    import subprocess
    import sys

    repo = Path(__file__).resolve().parents[3]
    args = [sys.executable, str(repo / "run_benchmark.py"), "--threads", "1", "eval", "--protocol", "finetune",
            "--dataset", "imagefolder", "--data-root", str(root), "--random-init", "vit_cpu_tiny"]
    for k, v in {**TINY, "resume_every": 2}.items():
        if k != "dataset":
            args += ["--set", f"{k}={v}"]
    env = {**os.environ, "SSL_BENCH_RESULTS": str(tmp_path / "b"), "SSL_BENCH_HOME": str(tmp_path / "home"),
           "SSL_BENCH_FAULT_KILL_AFTER_STEP": "4", "PYTHONPATH": str(repo)}
    killed = subprocess.run(args, env=env, capture_output=True, text=True, timeout=300)
    assert killed.returncode == -9, killed.stderr[-2000:]  # SIGKILL after step 4 of 6, inside the second epoch
    assert not list((tmp_path / "b").glob("*.json"))
    full = ModelHandle.random_init("vit_cpu_tiny", seed=0)
    monkeypatch.setenv("SSL_BENCH_RESULTS", str(tmp_path / "b"))
    resumed = build_protocol("finetune", None, TINY).run(full, root)[0]
    monkeypatch.setenv("SSL_BENCH_RESULTS", str(tmp_path / "a"))
    whole = build_protocol("finetune", None, TINY).run(full, root)[0]
    assert resumed.params["resumed"] and [t["from_step"] for t in resumed.params["trained_on"]] == [0, 4]
    assert resumed.metrics == pytest.approx(whole.metrics, abs=1e-9)
    a, b = load_file(whole.artifacts["checkpoint"]), load_file(resumed.artifacts["checkpoint"])
    for k in a:
        torch.testing.assert_close(b[k], a[k], rtol=1e-5, atol=1e-6)


def test_randaugment_posterize_to_zero_bits_is_the_old_pillow_black_image():
    import numpy as np
    from PIL import Image, ImageOps

    from benchmarks.finetune.config import FinetuneConfig
    from benchmarks.finetune.data import train_transform

    transform = train_transform(FinetuneConfig(input_size=64))
    ops = [op for step in transform.transforms for op in getattr(step, "ops", []) if "Posterize" in op.name]
    image = Image.new("RGB", (8, 8), (200, 100, 50))
    assert ops and all(np.asarray(op.aug_fn(image, 0)).max() == 0 for op in ops)
    assert np.array_equal(np.asarray(ops[0].aug_fn(image, 4)), np.asarray(ImageOps.posterize(image, 4)))
