"""What the built-in protocols declare about their numbers, as data: the headline metric
(``HEADLINE_METRIC``) and how variants read in headers (``VARIANT_LABELS``).

The tables (leaderboard, report, compare) read these through harness.registry without importing
the protocols' modules, which import torch: `ssl-bench leaderboard` and `ssl-bench report` start
in a fraction of the time. The protocol classes state the same values
(tests/test_records_scale.py checks that they agree)."""
from __future__ import annotations

DECLARATIONS: dict[str, dict] = {
    "knn": {"HEADLINE_METRIC": "top1", "VARIANT_LABELS": {"k": "k={}", "feature": "{}"}},
    "linear": {"HEADLINE_METRIC": "top1", "VARIANT_LABELS": {"recipe": "{}", "cached_features": "cached features"}},
    "dense_nn": {"HEADLINE_METRIC": "mIoU", "VARIANT_LABELS": {"fraction": "{}"}},
    "seg_linear": {"HEADLINE_METRIC": "mIoU", "VARIANT_LABELS": {}},
    "segmenter": {"HEADLINE_METRIC": "mIoU", "VARIANT_LABELS": {}},
}
