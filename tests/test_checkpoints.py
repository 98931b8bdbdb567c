import json

import pytest
import torch

from harness.backbone import create_backbone
from harness.checkpoints import load_backbone, load_checkpoint, save_checkpoint, verify_sha256
from harness.errors import CheckpointError


def _save(tmp_path, arch="vit_cpu_tiny"):
    torch.manual_seed(0)
    b = create_backbone(arch)
    meta = {"method": "dino", "arch": arch, "arch_kwargs": b.arch_kwargs, "epochs": 1}
    return b, save_checkpoint(tmp_path / "ckpt", b.state_dict(), meta)


def test_round_trip_and_metadata(tmp_path):
    b, path = _save(tmp_path)
    state, meta = load_checkpoint(path)
    assert meta["format"] == "ssl-bench/1" and meta["patch_size"] == 8 and len(meta["sha256"]) == 64
    assert all(torch.equal(state[k], v) for k, v in b.state_dict().items())
    b2, _ = load_backbone(path)
    x = torch.randn(1, 3, 64, 64)
    assert torch.equal(b.eval()(x), b2.eval()(x))
    assert verify_sha256(path) == meta["sha256"]


def test_other_architecture_is_refused(tmp_path):
    _, path = _save(tmp_path)
    with pytest.raises(CheckpointError, match="holds arch 'vit_cpu_tiny'"):
        load_backbone(path, arch="vit_small_patch16_224")
    # metadata tampered to claim another arch: the strict load names the mismatches
    meta_path = tmp_path / "ckpt.json"
    meta = json.loads(meta_path.read_text())
    meta["arch_kwargs"]["embed_dim"] = 96
    meta["arch_kwargs"]["num_heads"] = 3
    meta_path.write_text(json.dumps(meta))
    with pytest.raises(CheckpointError, match="shape mismatches"):
        load_backbone(path)


def test_missing_and_corrupt_files(tmp_path):
    with pytest.raises(CheckpointError, match="not found"):
        load_checkpoint(tmp_path / "nothing.safetensors")
    _, path = _save(tmp_path)
    path.write_bytes(b"not a safetensors file")
    with pytest.raises(CheckpointError, match="cannot be read"):
        load_checkpoint(path)


def test_sha256_detects_changes(tmp_path):
    b, path = _save(tmp_path)
    from safetensors.torch import save_file

    state = {k: v.clone() for k, v in b.state_dict().items()}
    state["norm.bias"] += 1
    save_file(state, str(path))
    with pytest.raises(CheckpointError, match="sha256"):
        verify_sha256(path)
