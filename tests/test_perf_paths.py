"""The fast extraction paths compute the same features as the plain one; the FLOP counter
behind the performance numbers is right (harness/models/flops.py, experiments/, docs/BENCHMARKS.md)."""

import numpy as np
import pytest
import torch

from harness.models.flops import VitShape, backbone_flops, gemm_shapes, shape_flops, vit_flops
from harness.models.backbone import create_backbone
from harness.data.transforms import PatchMultipleResize, ResizeCenterCrop
from harness.features.extract import extract_features, intra_op_threads
from harness.models.handle import ModelHandle
from harness.runtime import device as devices
from image_sources import RandomImages


@pytest.fixture
def model():
    return ModelHandle.random_init("vit_cpu_tiny", seed=5)


def _extract(model, src, tf, tmp_path, **kw):
    kw = {"n_last_blocks": 2, "patches": True, "cache": False, "progress": False, **kw}
    return extract_features(model, src, tf, cache_dir=tmp_path, **kw)


def _assert_same(a, b, atol=1e-5):
    np.testing.assert_allclose(a.cls, b.cls, atol=atol)
    np.testing.assert_allclose(a.patch_mean, b.patch_mean, atol=atol)
    np.testing.assert_array_equal(a.grids, b.grids)
    np.testing.assert_array_equal(a.offsets, b.offsets)
    np.testing.assert_allclose(a.patch_flat, b.patch_flat, atol=atol)


def test_threads_engine_equals_plain_engine_and_direct_forward(tmp_path, model):
    src = RandomImages([(64, 64)] * 7)
    tf = ResizeCenterCrop(resize=64, crop=64)
    plain = _extract(model, src, tf, tmp_path, engine="plain", batch_size=3)
    before = torch.get_num_threads()
    fast = _extract(model, src, tf, tmp_path, engine="threads", threads=2, batch_size=3)
    assert torch.get_num_threads() == before  # the engine restores torch's thread count
    _assert_same(fast, plain)
    x = torch.stack([tf(im) for im in src.images])
    with torch.inference_mode():
        ref = model.backbone.get_features(x, n_last_blocks=2)
    np.testing.assert_allclose(fast.cls, ref.cls.numpy(), atol=1e-5)
    for i in (0, 6):
        np.testing.assert_allclose(fast.patches(i), ref.patches[i].numpy(), atol=1e-5)
    st = fast.stages
    assert st["engine"] == "threads" and st["threads"] == 2 and st["forward_s"] > 0
    assert 0.0 <= st["outside_forward_share"] <= 1.0


def test_threads_engine_variable_sizes_keep_dataset_order(tmp_path, model):
    sizes = [(64, 64), (40, 72), (64, 64), (40, 72), (33, 70), (64, 64), (64, 64)]
    src = RandomImages(sizes, seed=1)
    tf = PatchMultipleResize(patch_size=8)
    plain = _extract(model, src, tf, tmp_path, engine="plain", batch_size=5, patch_dtype="float16")
    fast = _extract(model, src, tf, tmp_path, engine="threads", threads=3, batch_size=5, patch_dtype="float16")
    assert fast.patch_flat.dtype == np.float16
    _assert_same(fast, plain, atol=1e-3)  # float16 storage: the same rounding of the same values
    assert [tuple(g) for g in fast.grids] == [(8, 8), (5, 9), (8, 8), (5, 9), (4, 9), (8, 8), (8, 8)]


def test_worker_processes_and_single_thread_sources(tmp_path, model):
    src = RandomImages([(64, 64)] * 4, seed=2)
    tf = ResizeCenterCrop(resize=64, crop=64)
    ref = _extract(model, src, tf, tmp_path, engine="plain", batch_size=2)
    _assert_same(_extract(model, src, tf, tmp_path, batch_size=2, num_workers=1), ref)
    src.thread_safe = False  # read by one loader thread
    src.threads_seen.clear()
    _assert_same(_extract(model, src, tf, tmp_path, batch_size=2, threads=2), ref)
    assert len(src.threads_seen) == 1


def test_loader_error_propagates_and_restores_threads(tmp_path, model):
    class Broken(RandomImages):
        def load_image(self, i):
            if i == 5:
                raise OSError("corrupt")
            return super().load_image(i)

    before = torch.get_num_threads()
    with pytest.raises(OSError, match="corrupt"):
        extract_features(model, Broken([(64, 64)] * 8), ResizeCenterCrop(64, 64), cache_dir=tmp_path,
                         progress=False, batch_size=2)
    assert torch.get_num_threads() == before
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(ValueError, match="engine"):
        extract_features(model, RandomImages([(64, 64)]), ResizeCenterCrop(64, 64), cache_dir=tmp_path,
                         progress=False, engine="fast")


def test_intra_op_threads_restores_on_error():
    before = torch.get_num_threads()
    with pytest.raises(RuntimeError):
        with intra_op_threads(1):
            assert torch.get_num_threads() == 1
            raise RuntimeError
    assert torch.get_num_threads() == before


def test_bf16_path_runs_and_stays_close(tmp_path, model):
    failure = devices.cpu_kernel_failure("bf16")
    if failure:  # e.g. an AMX Xeon under ATEN_CPU_CAPABILITY=default; the refusal is tests/test_device.py's
        pytest.skip(f"this CPU cannot run torch's bf16 kernels here: {failure}")
    src = RandomImages([(64, 64)] * 4, seed=3)
    tf = ResizeCenterCrop(resize=64, crop=64)
    f32 = _extract(model, src, tf, tmp_path, n_last_blocks=1)
    b16 = _extract(model, src, tf, tmp_path, n_last_blocks=1, precision="bf16")
    assert b16.cls.dtype == np.float32 and np.isfinite(b16.cls).all()
    for a, b in ((f32.cls[:, 0], b16.cls[:, 0]), (f32.patch_flat[:, 0], b16.patch_flat[:, 0])):
        cos = torch.nn.functional.cosine_similarity(torch.from_numpy(a), torch.from_numpy(b), dim=1)
        assert cos.min() > 0.99
    assert not np.array_equal(f32.cls, b16.cls)  # bf16 really ran


def test_single_block_features_are_views_with_the_same_values():
    torch.manual_seed(0)
    b = create_backbone("vit_cpu_tiny").eval()
    x = torch.randn(2, 3, 48, 64)
    with torch.inference_mode():
        one = b.get_features(x, n_last_blocks=1)
        two = b.get_features(x, n_last_blocks=2)
        tokens = b(x)
    assert torch.equal(one.cls[:, 0], two.cls[:, 1]) and torch.equal(one.patches[:, 0], two.patches[:, 1])
    assert torch.equal(one.cls[:, 0], tokens[:, 0])
    assert torch.equal(one.patches[:, 0].reshape(2, 48, 64), tokens[:, 1:])


def test_flop_counter_equals_hand_count():
    # embed 8, depth 2, 2 heads, patch 4, 8x12 image, MLP 32, 1 cls token:
    # N = 2*3 = 6 patches, T = 7 tokens
    #   patch embed 6 * (3*4*4) * 8          =   2304 MACs
    #   per block   qkv 7*8*24 = 1344, attn 2*7*7*8 = 784, proj 7*8*8 = 448, mlp 2*7*8*32 = 3584
    #               = 6160 MACs, x 2 blocks  =  12320
    #   total 14624 MACs = 29248 FLOPs
    f = vit_flops(embed_dim=8, depth=2, num_heads=2, patch_size=4, height=8, width=12, mlp_hidden=32)
    assert f["total"] == 29248
    assert f["patch_embed"] == 2 * 2304 and f["attn"] == 2 * 2 * 784 and f["mlp"] == 2 * 2 * 3584
    shape = VitShape(embed_dim=8, depth=2, num_heads=2, patch_size=4, mlp_hidden=32)
    gemm = sum(2 * bc * m * k * n * calls for _, bc, m, k, n, calls in gemm_shapes(shape, 8, 12, batch=3))
    assert gemm == 3 * f["total"]
    # ViT-S/16 at 224: the well-known 4.6 GMACs
    assert abs(shape_flops(VitShape.of_arch("vit_small_patch16_224"), 224, 224) / 2e9 - 4.6) < 0.05
    tiny = create_backbone("vit_cpu_tiny")
    assert VitShape.of(tiny) == VitShape.of_arch("vit_cpu_tiny")
    assert backbone_flops(tiny, 64, 64) == shape_flops(VitShape.of_arch("vit_cpu_tiny"), 64, 64)
