"""experiments/texture_labels.py: the scene split relabelled by texture (shapes merged)."""
import numpy as np
import pytest

from experiments.texture_labels import texture_label_map, write_texture_voc
from harness.data.segmentation import VOCSegmentation
from harness.data.synthetic import NUM_STUFF, SEG_CLASSES
from harness.errors import DataError


def test_label_map_keeps_stuff_and_merges_shapes():
    lut, names = texture_label_map()
    assert names[:NUM_STUFF] == list(SEG_CLASSES[:NUM_STUFF])
    assert [int(lut[i]) for i in range(NUM_STUFF)] == list(range(NUM_STUFF))
    for label, name in enumerate(SEG_CLASSES[NUM_STUFF:], NUM_STUFF):
        assert names[lut[label]] == name.split("_")[0]
    assert lut[255] == 255


def test_written_masks_are_the_originals_relabelled(synth_tiny, tmp_path):
    out = write_texture_voc(synth_tiny, tmp_path / "tex")
    lut, names = texture_label_map()
    for split in ("train", "val"):
        orig, new = VOCSegmentation(synth_tiny, split), VOCSegmentation(out, split)
        assert new.class_names == tuple(names) and len(new) == len(orig)
        for i in range(len(orig)):
            assert np.array_equal(new.load_mask(i), lut[orig.load_mask(i)])
            assert np.array_equal(np.asarray(new.load_image(i)), np.asarray(orig.load_image(i)))
    with pytest.raises(DataError, match="exists"):
        write_texture_voc(synth_tiny, out)
