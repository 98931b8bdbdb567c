"""Per-image statistics are open to new kinds: the generic ``means`` and ``ratios`` kinds give
the protocol's metric on the whole set and on resamples, and a protocol's own kind, registered in
its folder and named in its declaration, is read without harness/per_image.py knowing it."""
from __future__ import annotations

import json
import sys
import textwrap

import numpy as np
import pytest

import harness.per_image as per_image
from harness.per_image import PerImageError, decode_array, encode_array, means_block, ratios_block, read_per_image
from harness.results import bootstrap


def test_float_arrays_round_trip_through_json():
    a = np.random.default_rng(0).normal(size=(7, 3))
    block = json.loads(json.dumps(encode_array(a)))
    np.testing.assert_array_equal(decode_array(block), a)
    np.testing.assert_array_equal(decode_array(encode_array(a.astype(np.float32))), a.astype(np.float32))


def test_means_kind_is_the_mean_of_the_values_on_the_whole_set_and_on_a_resample():
    ap = np.array([0.2, 0.9, 0.5, 0.7])
    stats = read_per_image(json.loads(json.dumps(means_block({"mAP": ap}, scale=100.0))))
    assert stats.kind == "means" and stats.images == 4
    assert stats.metric_of_weights(np.ones((1, 4)), "mAP")[0] == pytest.approx(100 * ap.mean())
    twice_first = np.array([[2, 0, 1, 1]])
    assert stats.metric_of_weights(twice_first, "mAP")[0] == pytest.approx(100 * (2 * 0.2 + 0.5 + 0.7) / 4)
    iv = bootstrap.intervals(stats, ["mAP"])["mAP"]
    low, high = iv.low, iv.high
    assert low < 100 * ap.mean() < high


def test_ratios_kind_gives_an_rmse_over_all_pixels():
    rng = np.random.default_rng(1)
    errors = [rng.normal(size=n) for n in (10, 30, 5)]
    block = ratios_block({"rmse": [float((e ** 2).sum()) for e in errors]},
                         {"rmse": [float(e.size) for e in errors]}, root={"rmse": True})
    stats = read_per_image(block)
    everything = np.concatenate(errors)
    assert stats.metric_of_weights(np.ones((1, 3)), "rmse")[0] == pytest.approx(np.sqrt((everything ** 2).mean()))
    assert stats.metric_of_weights(np.array([[0, 3, 0]]), "rmse")[0] == pytest.approx(np.sqrt((errors[1] ** 2).mean()))


def test_unknown_kind_names_the_known_ones():
    with pytest.raises(PerImageError, match="known kinds: .*means.*ratios"):
        read_per_image({"kind": "no-such-kind", "metrics": ["x"]})


def test_a_protocol_declares_its_own_kind(tmp_path, monkeypatch):
    """A kind defined in a protocol's folder: harness.per_image imports its module when a block
    of that kind is read, through the declaration, and the bootstrap works on it."""
    import harness.registry as registry
    from harness.declaration import ProtocolDeclaration
    from harness.metrics import Metric

    (tmp_path / "median_demo_kind.py").write_text(textwrap.dedent('''
        import numpy as np
        from harness.per_image import PerImageStats, decode_array, register_kind

        @register_kind("count_pairs")
        class CountPairs(PerImageStats):
            def read_rows(self, block):
                return decode_array(block["pairs"]).astype(np.int64)

            def metric_of(self, sums, metric):
                return 100.0 * sums[:, 0] / sums[:, 1]
    '''))
    monkeypatch.syspath_prepend(str(tmp_path))
    declared = dict(registry.protocol_declarations())
    declared["median_demo"] = ProtocolDeclaration(
        name="median_demo", module="median_demo_protocol", metrics=(Metric("share", per_image="count_pairs"),),
        per_image_kinds={"count_pairs": "median_demo_kind"})
    monkeypatch.setattr(registry, "_DECLARATIONS", declared)
    block = {"kind": "count_pairs", "metrics": ["share"], "pairs": encode_array(np.array([[1, 2], [3, 4], [0, 4]]))}
    assert "median_demo_kind" not in sys.modules
    stats = read_per_image(block)
    assert stats.metric_of_weights(np.ones((1, 3)), "share")[0] == pytest.approx(40.0)
    assert "count_pairs" in per_image.known_kinds()
    assert bootstrap.intervals(stats, ["share"])["share"].low <= 40.0
    monkeypatch.delitem(per_image._KINDS, "count_pairs")
    monkeypatch.delitem(sys.modules, "median_demo_kind")
