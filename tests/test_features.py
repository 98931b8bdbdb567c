import numpy as np
import pytest
import torch
from PIL import Image

from harness.config import fingerprint
from harness.data.transforms import PatchMultipleResize, ResizeCenterCrop
from harness.features.extract import extract_features
from harness.models.handle import ModelHandle
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


KILLED_EXTRACTION = """
import os, signal, sys
from pathlib import Path
from harness.features import extract as features
from harness.data.transforms import ResizeCenterCrop
from harness.models.handle import ModelHandle
from image_sources import RandomImages

def killed(out, *args):
    (out / "patches.bin").write_bytes(b"half")
    os.kill(os.getpid(), signal.SIGKILL)

features._extract_into = killed
features.extract_features(ModelHandle.random_init("vit_cpu_tiny", seed=3), RandomImages([(64, 64)] * 3),
                          ResizeCenterCrop(64, 64), cache_dir=Path(sys.argv[1]), progress=False)
"""


@pytest.mark.slow  # end to end (seconds); CI runs it with the slow suite
def test_temp_dirs_of_killed_extractions_are_cleaned(tmp_path, model):
    """kill -9 during an extraction leaves its `.<key>.<random>/` folder; the next extraction
    removes it (its owner process is dead)."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    cache = tmp_path / "cache"
    tests = Path(__file__).parent  # the script imports the harness and tests/image_sources.py
    import_path = os.pathsep.join(filter(None, [str(tests.parent), str(tests), os.environ.get("PYTHONPATH")]))
    proc = subprocess.run([sys.executable, "-c", KILLED_EXTRACTION, str(cache)], capture_output=True, text=True,
                          timeout=300, env=dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=import_path))
    assert proc.returncode == -9, proc.stderr
    left = [p for p in cache.iterdir() if p.name.startswith(".")]
    assert len(left) == 1 and (left[0] / "patches.bin").is_file()
    fs = extract_features(model, RandomImages([(64, 64)] * 3), ResizeCenterCrop(64, 64), cache_dir=cache,
                          progress=False)
    assert not fs.from_cache
    assert sorted(p.name for p in cache.iterdir()) == [fs.key]


def test_stale_temp_dir_rules(tmp_path):
    """Removed: a dead owner's folder, an ownerless folder older than the limit. Kept: a
    folder whose owner runs, an ownerless young one (an older version may be writing it),
    cache entries and anything not named like a temp folder."""
    import os
    import subprocess
    import sys
    import time

    from harness.io_utils import OWNER_FILE, clean_stale_tempdirs, make_owned_tempdir

    live = make_owned_tempdir(tmp_path, prefix="." + "a" * 24 + ".")
    dead = make_owned_tempdir(tmp_path, prefix="." + "b" * 24 + ".")
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True).stdout.strip()
    owner = dead / OWNER_FILE
    owner.write_text(owner.read_text().replace(str(os.getpid()), gone))
    key = "c" * 24
    old_legacy, young_legacy = tmp_path / f".{key}.x1", tmp_path / f".{key}.x2"
    entry, foreign = tmp_path / key, tmp_path / ".git"  # a cache entry; something not ours
    for d in (old_legacy, young_legacy, entry, foreign):
        d.mkdir()
    old = time.time() - 48 * 3600
    for d in (old_legacy, entry, foreign):
        os.utime(d, (old, old))
    removed = clean_stale_tempdirs(tmp_path, max_age_hours=24)
    assert sorted(p.name for p in removed) == sorted([dead.name, old_legacy.name])
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([live.name, young_legacy.name, key, ".git"])
