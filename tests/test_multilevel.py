"""The multi-level adapter (harness.models.multilevel): shapes per rescale, parameter names as
iBOT's, out_with_norm, and the one-line refusals of models without a multi-level path."""
import pytest
import torch

from harness.context.pixels import PixelBackbone
from harness.errors import ConfigError
from harness.models.backbone import create_backbone
from harness.models.multilevel import MultiLevelBackbone, check_multilevel, official_rescales


def _tiny(depth=4, patch=16, dim=32):
    torch.manual_seed(0)
    return create_backbone("vit_cpu_tiny", depth=depth, patch_size=patch, embed_dim=dim, img_size=64)


def test_shapes_and_strides_patch16():
    ml = MultiLevelBackbone(_tiny(), out_indices=(0, 1, 2, 3)).eval()
    outs = ml(torch.randn(2, 3, 64, 96))
    # grid 4 x 6 -> x4, x2, x1, x0.5
    assert [tuple(o.shape) for o in outs] == [(2, 32, 16, 24), (2, 32, 8, 12), (2, 32, 4, 6), (2, 32, 2, 3)]
    assert ml.out_strides == [4, 8, 16, 32] and ml.out_channels == [32] * 4


def test_patch8_uses_ibot_patch8_branch():
    assert official_rescales(8) == (2.0, 1.0, 0.5, 0.25) and official_rescales(14) == (4.0, 2.0, 1.0, 0.5)
    ml = MultiLevelBackbone(_tiny(patch=8), out_indices=(0, 1, 2, 3)).eval()
    outs = ml(torch.randn(1, 3, 64, 64))
    assert [o.shape[-1] for o in outs] == [16, 8, 4, 2]
    assert ml.out_strides == [4, 8, 16, 32]


def test_parameter_names_follow_ibot():
    ml = MultiLevelBackbone(_tiny(), out_indices=(0, 1, 2, 3))
    own = sorted({n.split(".")[0] + "." + n.split(".")[1] for n, _ in ml.named_parameters()
                  if not n.startswith("model.")})
    # fpn1: deconv (0), BN (1), GELU, deconv (3); fpn2: one deconv; fpn3 / fpn4 have no weights
    assert own == ["fpn1.0", "fpn1.1", "fpn1.3", "fpn2.0"]
    assert isinstance(ml.fpn1[1], torch.nn.BatchNorm2d)
    assert isinstance(MultiLevelBackbone(_tiny(), (0, 1, 2, 3), norm="syncbn").fpn1[1], torch.nn.SyncBatchNorm)


def test_levels_are_the_chosen_blocks_with_or_without_final_norm():
    vit = _tiny().eval()
    x = torch.randn(1, 3, 64, 64)
    tokens = vit.prepare_tokens(x)
    raw = []
    for blk in vit.blocks:
        tokens = blk(tokens)
        raw.append(tokens[:, 1:])
    for with_norm in (False, True):
        ml = MultiLevelBackbone(vit, out_indices=(1, 3), rescales=(1, 1), out_with_norm=with_norm).eval()
        got = ml.block_features(x)
        for level, i in zip(got, (1, 3)):
            want = vit.norm(raw[i]) if with_norm else raw[i]
            assert torch.allclose(level.flatten(2).transpose(1, 2), want, atol=1e-5)


def test_refusals_say_what_the_model_has():
    with pytest.raises(ConfigError, match="needs blocks \\[4, 6, 8, 12\\].*vit_cpu_tiny has 3 blocks of width 64"):
        MultiLevelBackbone(create_backbone("vit_cpu_tiny"))
    with pytest.raises(ConfigError, match="one feature level"):
        check_multilevel(PixelBackbone(), (0, 1))
    with pytest.raises(ConfigError, match="no feature contract"):
        check_multilevel(torch.nn.Conv2d(3, 3, 1), (0,))
    with pytest.raises(ConfigError, match="distinct increasing"):
        check_multilevel(_tiny(), (2, 1))
    with pytest.raises(ConfigError, match="rescales must be 4 values"):
        MultiLevelBackbone(_tiny(), (0, 1, 2, 3), rescales=(3, 2, 1, 0.5))
