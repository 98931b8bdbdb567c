"""Regenerate benchmarks/discovery/fixtures/lost_parity.json from the official LOST code.

Runs valeoai/LOST unmodified on fixed patch features: object_discovery.lost (degree, seed, seed
expansion, detect_box with padding clip) on seeded synthetic key maps of several grids (a planted
object among background patches, integer-valued features for degree ties, a grid larger than
k = 100), datasets.bbox_iou and main_lost.py's CorLoc rule (any IoU >= 0.5) against seeded
ground-truth boxes, plus extract_gt_VOC (with and without remove_hards) and extract_gt_COCO on
hand-written annotations. Features and boxes are stored with the outputs.
"""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent


def _shared_helpers():
    """tests/reference/common.py, the helpers every fixture generator shares, loaded by its path: a
    generator runs as a script (``python benchmarks/<folder>/reference/gen_X.py``), and tests/ is no
    package (common.py says why)."""
    spec = importlib.util.spec_from_file_location("common", HERE.parents[2] / "tests" / "reference" / "common.py")
    module = sys.modules["common"] = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


common = sys.modules.get("common") or _shared_helpers()

REPOSITORY = "https://github.com/valeoai/LOST"
COMMIT = "fcedbecb644f18358a660ce58c739cc6374feda8"
FIXTURE = "lost_parity.json"
SEED = 49
# (rows, cols, dim, patch, image height, image width, k_patches, kind)
CASES = [
    (6, 8, 8, 16, 90, 128, 100, "planted"),
    (7, 5, 8, 16, 112, 70, 100, "planted"),
    (12, 12, 8, 8, 96, 93, 100, "planted"),
    (12, 12, 8, 8, 96, 96, 20, "planted"),
    (9, 11, 6, 16, 140, 170, 100, "integer"),
    (8, 8, 8, 8, 64, 64, 100, "gaussian"),
    (10, 10, 4, 16, 155, 160, 100, "integer"),
]


def features(rng, rows, cols, dim, kind) -> np.ndarray:
    """(rows*cols, dim) float32: a background direction plus noise, and a rectangle of patches
    along another direction (``planted``); small integers (``integer``, many degree ties); noise."""
    n = rows * cols
    if kind == "integer":
        return rng.choice(np.array([-2, -1, 1, 2], np.float32), size=(n, dim))  # no zero row: a seed needs A[s, s] > 0
    x = rng.normal(0.0, 1.0, size=(n, dim)).astype(np.float32)
    if kind == "planted":
        bg, obj = rng.normal(0, 1, dim), rng.normal(0, 1, dim)
        grid = np.zeros((rows, cols), bool)
        r0, c0 = rng.integers(0, rows // 2), rng.integers(0, cols // 2)
        grid[r0:r0 + rows // 3 + 1, c0:c0 + cols // 3 + 1] = True
        x += np.where(grid.reshape(-1, 1), 2.0 * obj, 1.5 * bg).astype(np.float32)
    return x.astype(np.float32)


def gt_boxes(rng, height, width, count) -> np.ndarray:
    x0 = rng.integers(0, width // 2, count)
    y0 = rng.integers(0, height // 2, count)
    x1 = np.minimum(width, x0 + rng.integers(width // 5, width, count))
    y1 = np.minimum(height, y0 + rng.integers(height // 5, height, count))
    return np.stack([x0, y0, x1, y1], 1).astype(np.int64)


def run_cases(od, ds, torch) -> list[dict]:
    rng = np.random.default_rng(SEED)
    out = []
    for rows, cols, dim, patch, h, w, k, kind in CASES:
        feats = features(rng, rows, cols, dim, kind)
        pred, _, scores, seed = od.lost(torch.from_numpy(feats)[None], [rows, cols], [patch, patch], (3, h, w),
                                        k_patches=k)
        gts = [gt_boxes(rng, h, w, int(rng.integers(1, 4))) for _ in range(3)] + [
            np.asarray([pred], dtype=np.int64)]  # one set that holds the prediction itself
        ious = [ds.bbox_iou(torch.from_numpy(np.asarray(pred)), torch.from_numpy(g)).tolist() for g in gts]
        hits = [bool(any(v >= 0.5 for v in i)) for i in ious]
        out.append({"grid": [rows, cols], "patch": patch, "image_hw": [h, w], "k_patches": k, "kind": kind,
                    "features": feats.tolist(), "seed": int(seed), "degree": (-scores).int().tolist(),
                    "box": [int(v) for v in pred], "gt_boxes": [g.tolist() for g in gts], "ious": ious,
                    "hits": hits})
    return out


def iou_edges(ds, torch) -> list[dict]:
    """Boxes at the edges of the rule: IoU exactly 1/2 in exact arithmetic, disjoint, touching, nested."""
    pairs = [([0, 0, 10, 10], [[0, 0, 10, 20]]), ([0, 0, 100, 100], [[0, 0, 100, 50]]),
             ([0, 0, 16, 16], [[16, 0, 32, 16]]), ([5, 5, 50, 60], [[100, 100, 120, 130], [0, 0, 48, 64]]),
             ([0, 0, 64, 48], [[0, 0, 64, 96]]), ([3, 7, 41, 29], [[3, 7, 41, 29]])]
    return [{"box": b, "gt_boxes": g,
             "ious": ds.bbox_iou(torch.tensor(b), torch.tensor(g, dtype=torch.int64)).tolist()} for b, g in pairs]


def gt_readers(ds) -> dict:
    voc_objects = [
        {"name": "dog", "bndbox": {"xmin": "1", "ymin": "1", "xmax": "500", "ymax": "375"},
         "truncated": "0", "difficult": "0"},
        {"name": "cat", "bndbox": {"xmin": "48", "ymin": "240", "xmax": "195", "ymax": "371"},
         "truncated": "1", "difficult": "0"},
        {"name": "person", "bndbox": {"xmin": "8", "ymin": "12", "xmax": "352", "ymax": "498"},
         "truncated": "0", "difficult": "1"},
    ]
    coco = [{"bbox": [10.4, 20.5, 30.5, 40.6], "iscrowd": 0, "category_id": 1},
            {"bbox": [0.5, 1.5, 2.5, 3.5], "iscrowd": 0, "category_id": 2},
            {"bbox": [5.0, 5.0, 10.0, 10.0], "iscrowd": 1, "category_id": 3}]
    voc = ds.extract_gt_VOC({"annotation": {"object": voc_objects}}, remove_hards=False)[0]
    voc_nohard = ds.extract_gt_VOC({"annotation": {"object": voc_objects}}, remove_hards=True)[0]
    return {"voc_objects": voc_objects, "voc_boxes": voc.tolist(), "voc_boxes_no_hard": voc_nohard.tolist(),
            "coco_annotations": coco, "coco_boxes": ds.extract_gt_COCO(coco, remove_iscrowd=True)[0].tolist()}


def main() -> None:
    args = common.parse_args(__doc__, HERE.parent / "fixtures" / FIXTURE, REPOSITORY, COMMIT)
    import torch

    ds = common.import_official(args.official, "datasets")
    od = common.import_official(args.official, "object_discovery")
    cases = run_cases(od, ds, torch)
    data = {
        "provenance": common.provenance(
            args, __file__, {"seed": SEED, "cases": [list(c) for c in CASES]},
            ["object_discovery.py", "datasets.py"], extra_modules=("scipy",),
            notes="main_lost.py's CorLoc rule (torch.any(ious >= 0.5)) is applied here to bbox_iou's output"),
        "how": "object_discovery.lost(feats[None], [rows, cols], [patch, patch], (3, H, W), k_patches) on the "
               "stored features; datasets.bbox_iou(pred, gt); datasets.extract_gt_VOC / extract_gt_COCO",
        "cases": cases,
        "corloc": 100.0 * float(np.mean([h for c in cases for h in c["hits"]])),
        "iou_edges": iou_edges(ds, torch),
        "gt_readers": gt_readers(ds),
    }
    common.finish(args, data)


if __name__ == "__main__":
    main()
