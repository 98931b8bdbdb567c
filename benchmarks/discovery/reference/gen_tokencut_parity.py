"""Regenerate benchmarks/discovery/fixtures/tokencut_parity.json from the official TokenCut code.

Runs YangtaoWANG95/TokenCut unmodified: object_discovery.ncut (cosine graph at tau, eps edges,
second generalized eigenvector, mean bipartition, seed flip, detect_box with the padding clip) on
the seeded synthetic key maps of gen_lost_parity.py (a class-token row prepended, as
main_tokencut.py passes it), with the binary graph and with --no-binary-graph, and datasets.bbox_iou
with main_tokencut.py's CorLoc rule against seeded ground-truth boxes. Features are stored.
"""
from __future__ import annotations

import numpy as np

from gen_lost_parity import CASES, HERE, SEED, common, features, gt_boxes  # loads common

REPOSITORY = "https://github.com/YangtaoWANG95/TokenCut"
COMMIT = "fed52cd5b60891baefd8ec7110dafa73be816ee1"
FIXTURE = "tokencut_parity.json"
SETTINGS = [{"tau": 0.2, "eps": 1e-5, "no_binary_graph": False},
            {"tau": 0.0, "eps": 1e-5, "no_binary_graph": False},
            {"tau": 0.2, "eps": 1e-5, "no_binary_graph": True}]


def run_cases(od, ds, torch) -> list[dict]:
    rng = np.random.default_rng(SEED + 1)
    out = []
    for rows, cols, dim, patch, h, w, _, kind in CASES:
        feats = features(rng, rows, cols, dim, kind)
        with_cls = np.concatenate([rng.normal(0, 1, (1, dim)).astype(np.float32), feats])
        gts = [gt_boxes(rng, h, w, int(rng.integers(1, 4))) for _ in range(3)]
        runs = []
        for s in SETTINGS:
            pred, _, _, seed, _, eigvec = od.ncut(torch.from_numpy(with_cls)[None], [rows, cols], [patch, patch],
                                                  (3, h, w), s["tau"], s["eps"], no_binary_graph=s["no_binary_graph"])
            sets = gts + [np.asarray([pred], dtype=np.int64) + np.array([0, 0, patch, 0])]  # a near miss/hit too
            ious = [ds.bbox_iou(torch.from_numpy(np.asarray(pred)), torch.from_numpy(g)).tolist() for g in sets]
            runs.append({**s, "seed": int(seed), "box": [int(v) for v in pred], "gt_boxes": [g.tolist() for g in sets],
                         "eigenvector": eigvec.reshape(-1).tolist(), "ious": ious,
                         "hits": [bool(any(v >= 0.5 for v in i)) for i in ious]})
        out.append({"grid": [rows, cols], "patch": patch, "image_hw": [h, w], "kind": kind,
                    "features": feats.tolist(), "runs": runs})
    return out


def main() -> None:
    args = common.parse_args(__doc__, HERE.parent / "fixtures" / FIXTURE, REPOSITORY, COMMIT)
    import torch

    ds = common.import_official(args.official, "datasets")
    od = common.import_official(args.official, "object_discovery")
    cases = run_cases(od, ds, torch)
    data = {
        "provenance": common.provenance(
            args, __file__, {"seed": SEED + 1, "cases": [list(c) for c in CASES], "settings": SETTINGS},
            ["object_discovery.py", "datasets.py"], extra_modules=("scipy",),
            notes="main_tokencut.py's CorLoc rule (torch.any(ious >= 0.5)) is applied here to bbox_iou's output"),
        "how": "object_discovery.ncut(cat([cls, feats])[None], [rows, cols], [patch, patch], (3, H, W), tau, eps, "
               "no_binary_graph=...) on the stored features; datasets.bbox_iou(pred, gt)",
        "cases": cases,
    }
    common.finish(args, data)


if __name__ == "__main__":
    main()
