"""The mmseg ViT resizes its position embeddings from the table the checkpoint was trained with (a
checkpoint imported at another size keeps that table), never from the grid resized at import."""
from __future__ import annotations

import pytest
import torch

from dinov2_files import official_file
from harness.models.importers import import_checkpoint


def test_mmseg_resizes_from_the_trained_table(tmp_path):
    """The mmseg ViT (mmseg_vit.py) resizes pos_embed itself for its crop: it
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
