"""Regenerate tests/fixtures/ibot_masks.json from the official iBOT code.

Runs bytedance/ibot loader.ImageFolderMask.__getitem__ unmodified (block masking, BEiT-style)
on a one-image folder whose transform returns one crop of grid * patch_size pixels, so each
call draws one mask from Python's ``random``. exact: the masks after random.seed(seed);
stats: the masked-ratio statistics of many draws after random.seed(0).
"""
from __future__ import annotations

import random
import tempfile
from pathlib import Path

import common

REPOSITORY = "https://github.com/bytedance/ibot"
COMMIT = "da316d82636a7a7356835ef224b13d5f3ace0489"
FIXTURE = "ibot_masks.json"
PATCH_SIZE = 16  # any: only grid = crop size // patch size matters
PRED_ASPECT_RATIO = (0.3, 1 / 0.3)
EXACT = [dict(seed=0, grid=[14, 14], pred_ratio=[0.0, 0.3], pred_ratio_var=[0.0, 0.2], n=40),
         dict(seed=1, grid=[8, 8], pred_ratio=[0.0, 0.3], pred_ratio_var=[0.0, 0.2], n=40),
         dict(seed=2, grid=[14, 14], pred_ratio=[0.3], pred_ratio_var=[0.1], n=20),
         dict(seed=3, grid=[6, 6], pred_ratio=[0.5], pred_ratio_var=[0.0], n=10)]
STATS = dict(seed=0, draws=3000, grids=[[14, 14], [8, 8]], pred_ratio=[0.0, 0.3], pred_ratio_var=[0.0, 0.2])


def dataset(loader, root: Path, grid, pred_ratio, pred_ratio_var):
    import torch

    h, w = grid
    return loader.ImageFolderMask(str(root), transform=lambda img: [torch.zeros(3, h * PATCH_SIZE, w * PATCH_SIZE)],
                                  patch_size=PATCH_SIZE, pred_ratio=list(pred_ratio),
                                  pred_ratio_var=list(pred_ratio_var), pred_aspect_ratio=PRED_ASPECT_RATIO,
                                  pred_shape="block")


def draw(ds):
    (mask,) = ds[0][-1]
    return mask


def main() -> None:
    args = common.parse_args(__doc__, FIXTURE, REPOSITORY, COMMIT)
    import numpy as np
    from PIL import Image

    loader = common.import_official(args.official, "loader")
    root = Path(tempfile.mkdtemp(prefix="ssl-bench-ibot-masks-"))
    (root / "class0").mkdir()
    Image.new("RGB", (8, 8)).save(root / "class0" / "img.png")

    exact = []
    for case in EXACT:
        ds = dataset(loader, root, case["grid"], case["pred_ratio"], case["pred_ratio_var"])
        random.seed(case["seed"])
        masks = ["".join("1" if v else "0" for v in draw(ds).flatten()) for _ in range(case["n"])]
        exact.append({k: v for k, v in case.items() if k != "n"} | {"masks": masks})
    stats = {}
    for grid in STATS["grids"]:
        ds = dataset(loader, root, grid, STATS["pred_ratio"], STATS["pred_ratio_var"])
        random.seed(STATS["seed"])
        ratios = np.array([draw(ds).mean() for _ in range(STATS["draws"])])
        masked = ratios[ratios > 0]
        stats[f"{grid[0]}x{grid[1]}"] = {"draws": STATS["draws"], "frac_unmasked": float((ratios == 0).mean()),
                                         "mean_masked_ratio": float(masked.mean()),
                                         "min_masked_ratio": float(masked.min()),
                                         "max_masked_ratio": float(masked.max())}
    how = (f"bytedance/ibot@{args.commit} loader.ImageFolderMask(pred_aspect_ratio=(0.3, 1/0.3), pred_shape='block') "
           "__getitem__ run unmodified on a one-image folder whose transform returns one crop of grid*patch pixels. "
           "exact: random.seed(seed) then consecutive masks (row-major bit strings). stats: random.seed(0) for each "
           "grid, `draws` masks with pred_ratio [0, 0.3], pred_ratio_var [0, 0.2]; masked ratio = masked patches / "
           "patches; mean, min and max over the masks with at least one masked patch.")
    data = {
        "provenance": common.provenance(
            args, __file__, {"patch_size": PATCH_SIZE, "pred_aspect_ratio": list(PRED_ASPECT_RATIO),
                             "pred_shape": "block", "exact": EXACT, "stats": STATS},
            ["loader.py"]),
        "how": how,
        "exact": exact,
        "stats": stats,
    }
    common.finish(args, data)


if __name__ == "__main__":
    main()
