"""A checkpoint imported at one input size (``img_size=``) and run at another gives the
official model's features at that size: the trained position-embedding grid is kept in the
imported file and resized once, from it, at run time (never from the grid resized at import)."""
from __future__ import annotations

import pytest
import torch

from harness.models.checkpoints import load_backbone, load_checkpoint, save_checkpoint
from harness.errors import ConfigError
from harness.models.importers import import_checkpoint

PATCH, DIM, NATIVE = 14, 32, 518  # DINOv2's patch and training size, a narrow width


def official_file(tmp_path, registers: bool):
    """A DINOv2-named backbone (flat hub layout) with rough random position embeddings, where a
    second interpolation differs most from the first."""
    g = torch.Generator().manual_seed(0)
    r = lambda *s, scale=0.1: torch.randn(*s, generator=g) * scale  # noqa: E731
    grid = NATIVE // PATCH
    sd = {"cls_token": r(1, 1, DIM, scale=1.0), "pos_embed": r(1, 1 + grid * grid, DIM, scale=1.0),
          "patch_embed.proj.weight": r(DIM, 3, PATCH, PATCH), "patch_embed.proj.bias": r(DIM),
          "mask_token": torch.zeros(1, DIM), "norm.weight": 1 + r(DIM), "norm.bias": r(DIM)}
    b = "blocks.0."
    sd.update({b + "norm1.weight": 1 + r(DIM), b + "norm1.bias": r(DIM), b + "attn.qkv.weight": r(3 * DIM, DIM),
               b + "attn.qkv.bias": r(3 * DIM), b + "attn.proj.weight": r(DIM, DIM), b + "attn.proj.bias": r(DIM),
               b + "ls1.gamma": 1 + r(DIM), b + "ls2.gamma": 1 + r(DIM),
               b + "norm2.weight": 1 + r(DIM), b + "norm2.bias": r(DIM), b + "mlp.fc1.weight": r(4 * DIM, DIM),
               b + "mlp.fc1.bias": r(4 * DIM), b + "mlp.fc2.weight": r(DIM, 4 * DIM), b + "mlp.fc2.bias": r(DIM)})
    if registers:
        sd["register_tokens"] = r(1, 4, DIM, scale=1.0)
    path = tmp_path / f"dinov2_{'reg' if registers else 'plain'}_pretrain.pth"
    torch.save(sd, path)
    return path


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



def test_mmseg_resizes_from_the_trained_table(tmp_path):
    """The mmseg ViT (benchmarks/segmentation/mmseg_vit.py) resizes pos_embed itself for its crop: it
    gets the trained table too, so that a crop of a third size is resized once, from the trained grid."""
    pytest.importorskip("mmseg")
    from benchmarks.segmentation import mmseg_vit, vit_weights
    from mmseg.registry import MODELS

    sd = torch.load(official_file(tmp_path, registers=False), weights_only=True)
    plain = {k: v for k, v in sd.items() if ".ls" not in k and k != "mask_token"}  # a DINO-layout ViT
    torch.save(plain, tmp_path / "dino.pth")
    mmseg_vit.register_mmseg_modules()
    pos = {}
    for name, size in (("native", None), ("at224", 224)):
        backbone, _ = import_checkpoint(tmp_path / "dino.pth", layout="dino_pretrain", num_heads=2, img_size=size)
        state = backbone.backbone_state_dict()
        assert ("pos_embed_native" in vit_weights.convert_state_dict(state)) == (size is not None)
        path = vit_weights.save_converted(state, tmp_path / f"{name}.safetensors")
        kwargs = vit_weights.backbone_kwargs(state, 2, 280, 0.0)
        vit = MODELS.build(dict(type="SslBenchViT", weights=str(path), **kwargs))
        vit.init_weights()
        pos[name] = vit.pos_embed.detach()
    assert torch.equal(pos["at224"], pos["native"])
