"""A checkpoint imported at one input size (``img_size=``) and run at another gives the
official model's features at that size: the trained position-embedding grid is kept in the
imported file and resized once, from it, at run time (never from the grid resized at import)."""
from __future__ import annotations

import pytest
import torch

from harness.models.checkpoints import load_backbone, load_checkpoint, save_checkpoint
from harness.errors import ConfigError
from harness.models.importers import import_checkpoint

from dinov2_files import NATIVE, official_file



def patches(backbone, size: int) -> torch.Tensor:
    x = torch.randn(2, 3, size, size, generator=torch.Generator().manual_seed(size))
    with torch.no_grad():
        return backbone.get_features(x).patches


@pytest.mark.parametrize("registers", [False, True], ids=["plain", "registers"])
def test_import_at_224_run_at_280_equals_native_import_run_at_280(tmp_path, registers):
    path = official_file(tmp_path, registers)
    import_checkpoint(path, tmp_path / "native", layout="dinov2", num_heads=2)
    _, report = import_checkpoint(path, tmp_path / "at224", layout="dinov2", num_heads=2, img_size=224)
    assert "37x37 -> 16x16" in report.pos_embed
    native, _ = load_backbone(tmp_path / "native.safetensors")
    at224, meta = load_backbone(tmp_path / "at224.safetensors")
    assert meta["arch_kwargs"]["img_size"] == 224 and meta["arch_kwargs"]["native_img_size"] == NATIVE
    assert at224.pos_embed.shape[1] == 16 * 16 + (0 if registers else 1)
    for size in (280, 224, NATIVE, 126):  # a third size, the import size, the training size, smaller
        assert torch.equal(patches(at224, size), patches(native, size)), f"run at {size}"


def test_native_checkpoints_hold_no_second_table(tmp_path):
    """Imports at the training size (and pretraining exports) keep their one table and settings."""
    path = official_file(tmp_path, registers=False)
    import_checkpoint(path, tmp_path / "native", layout="dinov2", num_heads=2)
    import_checkpoint(path, tmp_path / "same", layout="dinov2", num_heads=2, img_size=NATIVE)
    for stem in ("native", "same"):
        state, meta = load_checkpoint(tmp_path / f"{stem}.safetensors")
        assert "pos_embed_native" not in state and "native_img_size" not in meta["arch_kwargs"]


def test_an_import_resized_without_its_trained_table_refuses_other_sizes(tmp_path):
    """A file imported at another size before the trained table was kept: running it at its
    import size works, any other size is an error instead of a second interpolation."""
    path = official_file(tmp_path, registers=True)
    import_checkpoint(path, tmp_path / "at224", layout="dinov2", num_heads=2, img_size=224)
    state, meta = load_checkpoint(tmp_path / "at224.safetensors")
    state.pop("pos_embed_native")
    kwargs = {k: v for k, v in meta["arch_kwargs"].items() if k != "native_img_size"}
    save_checkpoint(tmp_path / "old", state, {**meta, "arch_kwargs": kwargs})
    old, _ = load_backbone(tmp_path / "old.safetensors")
    new, _ = load_backbone(tmp_path / "at224.safetensors")
    assert torch.equal(patches(old, 224), patches(new, 224))
    with pytest.raises(ConfigError, match="trained table was not kept.*20x20 patch grid"):
        patches(old, 280)
