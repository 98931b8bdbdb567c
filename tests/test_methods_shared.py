"""Shared method parts (methods/shared.py) against the official code's numbers."""
from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from harness.schedules import cosine_schedule
from image_folders import make_noise_folder
from methods.shared import (BlockMaskGenerator, Centering, DINOHead, MultiCropAugmentation, MultiCropConfig,
                            MultiCropDataset, WeightNormLinear, collate_crops, list_pretrain_images,
                            random_resized_crop_params, teacher_temp_schedule)

FIXTURES = Path(__file__).parent / "fixtures"
RTOL = 1e-5


def load_fixture(name: str) -> dict:
    return json.loads((FIXTURES / name).read_text())


@torch.no_grad()
def seed_named_tensors(named: dict, seed: int) -> None:
    """The heads' fixture weights, filled in place in name order after torch.manual_seed(seed):
    weight_g = 1 + 0.1 * randn, BatchNorm running statistics at their initial 1 / 0, every other
    float tensor randn * 0.5; other dtypes (num_batches_tracked) kept. The head generators of
    tests/reference/ fill the official heads through the same function."""
    torch.manual_seed(seed)
    for k in sorted(named):
        t = named[k]
        if t.dtype != torch.float32:
            continue
        if k.endswith("weight_g"):
            t.copy_(1 + 0.1 * torch.randn(t.shape))
        elif "running_var" in k:
            t.fill_(1)
        elif "running_mean" in k:
            t.fill_(0)
        else:
            t.copy_(torch.randn(t.shape) * 0.5)


class PythonRandomAsGenerator:
    """Replays Python's ``random`` module through the numpy Generator calls that
    BlockMaskGenerator makes, so its masks can be compared bit for bit with iBOT's
    loader (which draws from ``random``): ``random()`` is ``random.random``,
    ``integers(lo, hi)`` is ``random.randint(lo, hi - 1)`` (same draws as ``randint``
    and ``choice``)."""

    def __init__(self, seed: int):
        self.r = random.Random(seed)

    def random(self) -> float:
        return self.r.random()

    def integers(self, lo: int, hi: int) -> int:
        return self.r.randint(lo, hi - 1)


# ----------------------------------------------------------------------------- head
def _fill_head(head: torch.nn.Module) -> None:
    """Same deterministic parameters as the golden generator (sorted state-dict order)."""
    sd = {k: v.clone() for k, v in head.state_dict().items()}
    seed_named_tensors(sd, 1)
    head.load_state_dict(sd)


def test_dino_head_matches_official():
    gold = load_fixture("dino_head.json")
    head = DINOHead(8, 16, hidden_dim=12, bottleneck_dim=6, nlayers=3, use_bn=True, norm_last_layer=False)
    assert sorted(head.state_dict()) == gold["state_dict_keys"]  # official checkpoint names
    _fill_head(head)
    head.train()
    torch.manual_seed(2)
    y = head(torch.randn(5, 8))
    np.testing.assert_allclose(y.detach().numpy(), np.array(gold["output"]), rtol=RTOL, atol=1e-6)
    # BatchNorm's running mean of 5 rows: moved by 4.5e-8 between CPU kernel sets
    # (ATEN_CPU_CAPABILITY=default against the fixture), the output by 3.7e-7 (atol 1e-6 above);
    # 1e-6 leaves a 20x margin, a wrong momentum or batch statistic moves it by 1e-2
    np.testing.assert_allclose(head.mlp[1].running_mean.numpy(), gold["running_mean_1"], rtol=RTOL, atol=1e-6)


def test_dino_head_tokens_share_bn_statistics():
    head = DINOHead(8, 16, hidden_dim=12, bottleneck_dim=6, use_bn=True)
    x = torch.randn(3, 5, 8)
    np.testing.assert_allclose(head(x).reshape(15, 16).detach().numpy(),
                               head(x.reshape(15, 8)).detach().numpy(), rtol=1e-5, atol=1e-6)


def test_weight_norm_linear_is_torch_weight_norm():
    lin = WeightNormLinear(6, 10, fix_norm=True)
    assert not lin.weight_g.requires_grad and lin.weight_v.requires_grad
    with torch.no_grad():
        lin.weight_g.mul_(torch.rand(10, 1) + 0.5)
    ref = torch.nn.Linear(6, 10, bias=False)
    ref = torch.nn.utils.parametrizations.weight_norm(ref)
    ref.parametrizations.weight.original0.data.copy_(lin.weight_g)
    ref.parametrizations.weight.original1.data.copy_(lin.weight_v)
    x = torch.randn(4, 6)
    torch.testing.assert_close(lin(x), ref(x))
    assert torch.allclose(lin.weight.norm(dim=1, keepdim=True), lin.weight_g)


# ----------------------------------------------------------------------------- schedules
def test_cosine_schedule_matches_dino_cosine_scheduler():
    gold = load_fixture("dino_schedules.json")
    np.testing.assert_allclose(cosine_schedule(5e-4, 1e-6, 12, warmup_steps=3, start_warmup=1e-5),
                               gold["cosine_warmup"], rtol=1e-12)
    np.testing.assert_allclose(cosine_schedule(0.996, 1.0, 12), gold["cosine_plain"], rtol=1e-12)


def test_teacher_temp_schedule_is_per_epoch_linspace():
    gold = load_fixture("dino_loss.json")["teacher_temps"]
    sched = teacher_temp_schedule(0.04, 0.07, 3, 5, steps_per_epoch=4)
    assert len(sched) == 20
    np.testing.assert_allclose(sched[::4], gold, rtol=1e-12)
    assert np.all(sched[:4] == 0.04)
    with pytest.raises(Exception):
        teacher_temp_schedule(0.04, 0.07, 6, 5, steps_per_epoch=4)


def test_teacher_temp_schedule_per_step_is_synclr_linear():
    s = teacher_temp_schedule(0.04, 0.07, 0.5, 2, steps_per_epoch=10, per_step=True)
    assert s[0] == pytest.approx(0.04) and s[5] == pytest.approx(0.07) and s[-1] == pytest.approx(0.07)
    assert s[2] == pytest.approx(0.04 * 0.6 + 0.07 * 0.4)


# ----------------------------------------------------------------------------- centring
def test_centering_ema_update():
    c = Centering(4, momentum=0.9)
    t = torch.arange(8.0).reshape(2, 4)
    c.update(t)
    torch.testing.assert_close(c.center, 0.1 * t.mean(0, keepdim=True))
    p = Centering(4, momentum=0.9, tokens=True)
    tok = torch.randn(3, 5, 4)
    p.update(tok)
    assert p.center.shape == (1, 1, 4)
    torch.testing.assert_close(p.center, 0.1 * tok.mean(1).mean(0).reshape(1, 1, 4))
    probs = c.softmax(t, 0.1)
    torch.testing.assert_close(probs.sum(-1), torch.ones(2))


# ----------------------------------------------------------------------------- masking
def test_block_mask_matches_ibot_loader_bit_for_bit():
    gold = load_fixture("ibot_masks.json")
    for case in gold["exact"]:
        gen = BlockMaskGenerator(case["pred_ratio"], case["pred_ratio_var"], pred_shape="block")
        rng = PythonRandomAsGenerator(case["seed"])
        h, w = case["grid"]
        for expected in case["masks"]:
            mask = gen(h, w, rng)
            assert "".join("1" if v else "0" for v in mask.flatten()) == expected


@pytest.mark.parametrize("grid", [(14, 14), (8, 8)])
def test_block_mask_statistics_match_ibot_loader(grid):
    gold = load_fixture("ibot_masks.json")["stats"][f"{grid[0]}x{grid[1]}"]
    gen = BlockMaskGenerator([0.0, 0.3], [0.0, 0.2])
    rng = np.random.default_rng(0)
    ratios = np.array([gen(*grid, rng).mean() for _ in range(1500)])
    masked = ratios[ratios > 0]
    assert abs((ratios == 0).mean() - gold["frac_unmasked"]) < 0.04
    assert abs(masked.mean() - gold["mean_masked_ratio"]) < 0.01
    # extremes of 1,500 draws: within 3 patches (the exact test above pins the algorithm)
    tol = 3 / (grid[0] * grid[1])
    assert abs(masked.min() - gold["min_masked_ratio"]) <= tol
    assert abs(masked.max() - gold["max_masked_ratio"]) <= tol


def test_block_mask_options():
    gen = BlockMaskGenerator(0.3, 0.0, pred_start_epoch=2)
    rng = np.random.default_rng(1)
    assert not gen(14, 14, rng, epoch=1).any()
    assert 0 < gen(14, 14, rng, epoch=2).mean() <= 0.3 + 1e-9
    rand = BlockMaskGenerator(0.5, 0.0, pred_shape="rand")
    assert rand(4, 4, rng).sum() == 8
    with pytest.raises(Exception):
        BlockMaskGenerator([0.1, 0.3], [0.2, 0.0])


# ----------------------------------------------------------------------------- multi-crop
CPU_CROPS = MultiCropConfig(global_crops_size=64, local_crops_size=32, local_crops_number=4,
                            global_crops_scale=(0.4, 1.0), local_crops_scale=(0.1, 0.4), hue=0.5,
                            grayscale_p=0.5, blur_p_global1=0.0, blur_p_global2=0.0, blur_p_local=0.0)


def test_multicrop_shapes_and_determinism(tmp_path):
    root = make_noise_folder(tmp_path / "imgs")
    paths = list_pretrain_images(root)
    assert len(paths) == 6
    ds = MultiCropDataset(paths, MultiCropAugmentation(CPU_CROPS), seed=3)
    a = ds[1]
    assert [tuple(c.shape) for c in a] == [(3, 64, 64)] * 2 + [(3, 32, 32)] * 4
    b = MultiCropDataset(paths, MultiCropAugmentation(CPU_CROPS), seed=3)[1]
    assert all(torch.equal(x, y) for x, y in zip(a, b))
    ds.set_epoch(1)
    assert not torch.equal(ds[1][0], a[0])
    batch = collate_crops([ds[0], ds[1], ds[2]])
    assert len(batch) == 6 and batch[0].shape == (3, 3, 64, 64)


def test_multicrop_with_blur_and_solarize():
    cfg = MultiCropConfig(global_crops_size=48, local_crops_size=24, local_crops_number=2,
                          solarize_p_global2=1.0, blur_p_global2=1.0)
    img = Image.fromarray(np.random.default_rng(0).integers(0, 256, (60, 70, 3), dtype=np.uint8))
    crops = MultiCropAugmentation(cfg)(img, np.random.default_rng(0))
    assert [tuple(c.shape) for c in crops] == [(3, 48, 48)] * 2 + [(3, 24, 24)] * 2
    assert all(torch.isfinite(c).all() for c in crops)


def test_random_resized_crop_params_within_image():
    rng = np.random.default_rng(0)
    for _ in range(200):
        top, left, h, w = random_resized_crop_params(rng, 50, 70, (0.05, 1.0))
        assert 0 <= top and top + h <= 50 and 0 <= left and left + w <= 70 and h > 0 and w > 0


def test_list_pretrain_images_errors(tmp_path):
    with pytest.raises(Exception, match="no images"):
        list_pretrain_images(tmp_path)
