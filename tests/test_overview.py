"""The overview at the top of leaderboard.md and the report: a row per model, a column per
protocol's headline (direction marked, best starred), n/a and failed cells, mean rank and count;
and how each model was read."""
from __future__ import annotations

from harness.results.overview import build_overview, model_reading, overview_markdown
from harness.results.pair_status import PairStatus
from harness.results.records import make_record


def _record(model: str, protocol: str, dataset: str, metrics: dict, variant: dict | None = None) -> dict:
    info = {"name": model, "weights_key": model * 4, "arch": "vit_cpu_tiny", "method": "dino"}
    block = {"name": protocol, "preset": "synth", "dataset": dataset, "split": "val", "params": {},
             "fingerprint": f"{protocol}-fp"}
    return make_record(info, block, 0, variant or {}, metrics, {"wall_s": 1.0})


def test_overview_rows_columns_stars_ranks_and_empty_cells():
    records = [_record("a", "knn", "imagenet", {"top1": 50.0}, {"k": 20}),
               _record("b", "knn", "imagenet", {"top1": 70.0}, {"k": 20}),
               _record("c", "knn", "imagenet", {"top1": 60.0}, {"k": 20}),
               _record("a", "depth_linear", "nyu", {"rmse": 0.5}),
               _record("b", "depth_linear", "nyu", {"rmse": 0.9})]
    pairs = [PairStatus("c", "depth_linear", "synth", "failed", "boom"),
             PairStatus("c", "robustness", "synth", "not applicable", "no attention")]
    o = build_overview(records, pairs)
    assert len(o.headers) == 3 and o.headers[2] == "robustness (no number)"  # every pair of it gave none
    knn = next(i for i, h in enumerate(o.headers) if h.startswith("knn top1"))
    depth = 1 - knn
    assert o.headers[knn].endswith("↑") and o.headers[depth].endswith("↓")
    cells = dict(zip(o.models, o.cells))
    assert cells["b"][knn] == "70.00*" and cells["a"][depth] == "0.50*" and cells["c"][depth] == "failed"
    assert [cells[m][2] for m in "abc"] == ["–", "–", "n/a"]
    ranks = dict(zip(o.models, zip(o.mean_rank, o.counts)))
    assert ranks == {"a": (2.0, 2), "b": (1.5, 2), "c": (2.0, 1)}  # a: 3rd and 1st; b: 1st and 2nd; c: 2nd
    assert o.models[0] == "b"  # rows in mean-rank order
    md = overview_markdown(o, {"a": "timm:resnet18 · imagenet · layers last stage"})
    assert md.startswith("## Overview") and "| mean rank | protocols |" in md and "| 1 of 3 |" in md
    assert "- **a**: timm:resnet18" in md


def test_model_reading_states_source_normalisation_and_readout():
    adapter = {"adapter": "timm", "arch": "timm:resnet18", "stride": 32, "input_norm": "imagenet",
               "norm_source": "default imagenet", "pooling": "head", "layers": "last stage", "prefix_tokens": 0}
    text = model_reading({"name": "r18", "adapter": adapter, "spec": "timm:resnet18,weights=random"})
    assert text == ("timm:resnet18,weights=random · imagenet (default imagenet) · layers last stage, pooling head, "
                    "prefix tokens 0, stride 32")
    own = model_reading({"name": "v", "arch": "vit_cpu_tiny", "patch_size": 8})
    assert own.startswith("ssl-bench ViT vit_cpu_tiny")
