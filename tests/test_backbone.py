import math

import pytest
import torch
import torch.nn.functional as F

from harness.models.backbone import ARCHS, create_backbone
from harness.errors import ConfigError


def _official_interpolate(pos_embed, h0, w0):
    """DINO's interpolate_pos_encoding, restated: +0.1 scale factors, bicubic, no antialias."""
    cls, grid = pos_embed[:, :1], pos_embed[:, 1:]
    n = grid.shape[1]
    side = int(math.sqrt(n))
    grid = grid.reshape(1, side, side, -1).permute(0, 3, 1, 2)
    grid = F.interpolate(grid, scale_factor=((h0 + 0.1) / side, (w0 + 0.1) / side), mode="bicubic")
    return torch.cat([cls, grid.permute(0, 2, 3, 1).reshape(1, h0 * w0, -1)], dim=1)


def test_feature_api_shapes_any_multiple_of_patch():
    torch.manual_seed(0)
    b = create_backbone("vit_cpu_tiny").eval()
    x = torch.randn(2, 3, 48, 80)
    f = b.get_features(x, n_last_blocks=2)
    assert f.cls.shape == (2, 2, 64) and f.patches.shape == (2, 2, 6, 10, 64)
    # last block with norm equals forward_tokens
    tokens = b(x)
    assert torch.allclose(f.cls[:, -1], tokens[:, 0], atol=1e-6)
    assert torch.allclose(f.patches[:, -1].reshape(2, 60, 64), tokens[:, 1:], atol=1e-6)
    raw = b.get_features(x, final_norm=False)
    assert not torch.allclose(raw.cls, f.cls[:, -1:])


def test_input_not_multiple_of_patch_is_rejected():
    b = create_backbone("vit_cpu_tiny")
    with pytest.raises(ValueError, match="multiple of the patch size"):
        b(torch.randn(1, 3, 60, 64))


def test_official_position_interpolation():
    torch.manual_seed(0)
    b = create_backbone("vit_cpu_tiny")
    ours = b.interpolate_pos_embed(5, 11)
    ref = _official_interpolate(b.pos_embed.detach(), 5, 11)
    assert torch.allclose(ours, ref, atol=1e-7)
    assert torch.equal(b.interpolate_pos_embed(8, 8), b.pos_embed)


def test_mask_token_replaces_masked_patches_only():
    torch.manual_seed(0)
    student = create_backbone("vit_cpu_tiny", use_mask_token=True)
    x = torch.randn(1, 3, 64, 64)
    mask = torch.zeros(1, 8, 8, dtype=torch.bool)
    assert torch.equal(student.prepare_tokens(x, mask), student.prepare_tokens(x))
    mask[0, 2, 3] = True
    diff = (student.prepare_tokens(x, mask) - student.prepare_tokens(x)).abs().sum(-1)[0]
    assert diff.nonzero().flatten().tolist() == [1 + 2 * 8 + 3]
    assert "mask_token" not in student.backbone_state_dict()
    with pytest.raises(ConfigError, match="no mask token"):
        create_backbone("vit_cpu_tiny").prepare_tokens(x, mask)


def test_presets_build_with_timm_names():
    for arch in ("vit_small_patch16_224", "vit_large_patch14_224"):
        # structure only: on the meta device ViT-L's 300M weights are neither allocated nor drawn
        with torch.device("meta"):
            b = create_backbone(arch)
        kw = ARCHS[arch]
        assert b.embed_dim == kw["embed_dim"] and len(b.blocks) == kw["depth"]
        assert "blocks.0.attn.qkv.weight" in b.state_dict() and b.norm.eps == 1e-6
    with pytest.raises(ConfigError, match="unknown architecture"):
        create_backbone("resnet50")
