import numpy as np
import pytest
import torch
from PIL import Image

from harness.config import fingerprint
from harness.data.transforms import PatchMultipleResize, ResizeCenterCrop
from harness.features import extract_features
from harness.models import ModelHandle
from image_sources import RandomImages


@pytest.fixture
def model():
    return ModelHandle.random_init("vit_cpu_tiny", seed=3)


def test_features_equal_direct_forward_and_cache_is_reused(tmp_path, model):
    src = RandomImages([(64, 64)] * 5)
    tf = ResizeCenterCrop(resize=64, crop=64)
    fs = extract_features(model, src, tf, n_last_blocks=2, patches=True, batch_size=2,
                          cache_dir=tmp_path, progress=False)
    assert not fs.from_cache and fs.cls.shape == (5, 2, 64)
    x = torch.stack([tf(src.load_image(i)) for i in range(5)])
    with torch.no_grad():
        ref = model.backbone.get_features(x, n_last_blocks=2)
    np.testing.assert_allclose(fs.cls, ref.cls.numpy(), atol=1e-5)
    np.testing.assert_allclose(fs.patches(3), ref.patches[3].numpy(), atol=1e-5)
    np.testing.assert_allclose(fs.patch_mean, ref.patches.mean(dim=(2, 3)).numpy(), atol=1e-5)
    again = extract_features(model, src, tf, n_last_blocks=2, patches=True, cache_dir=tmp_path,
                             progress=False)
    assert again.from_cache and again.key == fs.key
    np.testing.assert_array_equal(again.cls, fs.cls)
    # another transform, layer choice or weights is another key
    other = extract_features(model, src, ResizeCenterCrop(resize=72, crop=64), n_last_blocks=2,
                             patches=True, cache_dir=tmp_path, progress=False)
    assert not other.from_cache and other.key != fs.key
    model2 = ModelHandle.random_init("vit_cpu_tiny", seed=4)
    assert extract_features(model2, src, tf, n_last_blocks=2, patches=True, cache_dir=tmp_path,
                            progress=False).key != fs.key


def test_variable_sizes_keep_dataset_order(tmp_path, model):
    src = RandomImages([(64, 64), (40, 72), (64, 64), (40, 72), (33, 70)])
    tf = PatchMultipleResize(patch_size=8)
    fs = extract_features(model, src, tf, patches=True, batch_size=5, cache_dir=tmp_path, progress=False)
    assert [tuple(g) for g in fs.grids] == [(8, 8), (5, 9), (8, 8), (5, 9), (4, 9)]
    for i in range(5):
        with torch.no_grad():
            ref = model.backbone.get_features(tf(src.load_image(i))[None])
        np.testing.assert_allclose(fs.patches(i), ref.patches[0].numpy(), atol=1e-5)


def test_failed_extraction_leaves_no_cache_entry(tmp_path, model):
    class Broken(RandomImages):
        def load_image(self, i):
            if i == 3:
                raise OSError("corrupt")
            return super().load_image(i)

    with pytest.raises(OSError):
        extract_features(model, Broken([(64, 64)] * 5), ResizeCenterCrop(64, 64), cache_dir=tmp_path,
                         progress=False, batch_size=2)
    assert list(tmp_path.iterdir()) == []


class JpegFiles(RandomImages):
    """Images on disk, with the content stamp the harness readers have."""

    def __init__(self, folder, n, seed=0):
        from harness.data.io import files_stamp

        super().__init__([(64, 64)] * n, seed)
        self.paths = [folder / f"{i}.png" for i in range(n)]
        for im, path in zip(self.images, self.paths):
            im.save(path)
        self.content_stamp = lambda: files_stamp(self.paths)

    def fingerprint(self):  # names only, like the readers: stable across machines
        return fingerprint([p.name for p in self.paths])

    def load_image(self, i):
        return Image.open(self.paths[i]).convert("RGB")


def test_cache_is_not_served_for_files_changed_in_place(tmp_path, model):
    data = tmp_path / "data"
    data.mkdir()
    src = JpegFiles(data, 3)
    tf = ResizeCenterCrop(resize=64, crop=64)
    first = extract_features(model, src, tf, cache_dir=tmp_path / "cache", progress=False)
    # regenerate the same file names with other content (e.g. a new SynthScenes version)
    Image.fromarray(np.zeros((64, 64, 3), np.uint8)).save(src.paths[1])
    again = extract_features(model, src, tf, cache_dir=tmp_path / "cache", progress=False)
    assert not again.from_cache and again.key != first.key
    assert not np.allclose(again.cls[1], first.cls[1]) and np.allclose(again.cls[0], first.cls[0], atol=1e-6)
