import json

import pytest
import torch

from harness.models.backbone import create_backbone
from harness.models.checkpoints import load_backbone, load_checkpoint, save_checkpoint, verify_sha256
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


def _other_weights(tmp_path, name="other"):
    torch.manual_seed(1)
    b = create_backbone("vit_cpu_tiny")
    meta = {"method": "dino", "arch": "vit_cpu_tiny", "arch_kwargs": b.arch_kwargs}
    return save_checkpoint(tmp_path / name, b.state_dict(), meta)


def test_weights_replaced_beside_an_old_json_are_refused(tmp_path):
    """The .json's sha256 is checked against the weights, not trusted: other weights put
    beside an old .json (same size: same architecture) are an error naming the file."""
    import shutil

    _, path = _save(tmp_path)
    recorded = json.loads((tmp_path / "ckpt.json").read_text())["sha256"]
    other = _other_weights(tmp_path)
    shutil.copyfile(other, path)
    with pytest.raises(CheckpointError, match="ckpt.safetensors") as err:
        load_checkpoint(path)
    assert recorded in str(err.value) and "sha256" in str(err.value)
    with pytest.raises(CheckpointError, match="sha256"):
        load_backbone(path)
    # asked for explicitly: the real hash of the weights loaded, never the recorded one
    state, meta = load_checkpoint(path, on_hash_mismatch="use_actual")
    assert meta["sha256"] == verify_sha256(other) != recorded
    assert meta["sha256_recorded"] == recorded
    assert torch.equal(state["norm.weight"], load_checkpoint(other)[0]["norm.weight"])


def test_a_pair_cut_between_its_two_writes_cannot_be_loaded(tmp_path, monkeypatch):
    """A kill after the new weights are in place and before the new .json is: the old .json
    beside new weights must not load (it would key caches and records by the old hash)."""
    import harness.models.checkpoints as ck

    _save(tmp_path)

    def killed(path, obj):
        raise KeyboardInterrupt("killed between the two writes")

    monkeypatch.setattr(ck, "atomic_write_json", killed)
    torch.manual_seed(1)
    b = create_backbone("vit_cpu_tiny")
    with pytest.raises(KeyboardInterrupt):
        save_checkpoint(tmp_path / "ckpt", b.state_dict(),
                        {"method": "dino", "arch": "vit_cpu_tiny", "arch_kwargs": b.arch_kwargs})
    monkeypatch.undo()
    with pytest.raises(CheckpointError, match="sha256"):
        load_checkpoint(tmp_path / "ckpt")


def test_unchanged_weights_are_trusted_without_rehashing(tmp_path, monkeypatch):
    import harness.models.checkpoints as ck

    _, path = _save(tmp_path)
    _, meta = load_checkpoint(path)
    assert {"weights_size", "weights_mtime_ns"} <= set(meta)
    calls = []
    monkeypatch.setattr(ck, "sha256_file", lambda p: calls.append(p) or "x")
    load_checkpoint(path)
    assert not calls  # size and mtime as recorded: no full hash
    path.touch()  # same bytes, new mtime: hashed again, and accepted
    monkeypatch.undo()
    assert load_checkpoint(path)[1]["sha256"] == meta["sha256"]


@pytest.mark.parametrize("content, expected", [
    ({"method": "dino", "arch_kwargs": {}}, "'arch'"),
    (["not", "an", "object"], "JSON object"),
])
def test_bad_metadata_is_a_checkpoint_error(tmp_path, content, expected):
    _, path = _save(tmp_path)
    (tmp_path / "ckpt.json").write_text(json.dumps(content))
    with pytest.raises(CheckpointError, match=expected) as err:
        load_backbone(path)
    assert "ckpt.json" in str(err.value)
