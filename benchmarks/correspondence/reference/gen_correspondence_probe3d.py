"""Regenerate benchmarks/correspondence/fixtures/correspondence_probe3d.json from Probe3D's own SPair-71k code.

Runs mbanani/probe3d unmodified:

- ``evaluate_spair_correspondence.compute_errors`` on stored feature maps (values on a 1/64
  grid) and keypoints, through a stand-in model that returns them (``matching``);
- ``evals.datasets.spair.SPairDataset`` (image_size 120, use_bbox False, image_mean imagenet,
  num_instances 2, each category and viewpoint bin) on correspondence SynthScenes written under
  three of SPair's category names (test_correspondence.write_parity_set): the pairs drawn, the
  keypoints, threshold scales and transformed images (``dataset``);
- ``evaluate_dataset`` on those data sets with a stand-in model (Probe3D's ``center_padding``
  to the patch size, then test_correspondence.standin_patch_features), and main()'s mean over
  categories of each bin's recall (``end_to_end``).

What is substituted: ``torch.Tensor.cuda`` is the identity (CPU run); ``faiss`` is stubbed (its
GPU resources are made at import time of evals.utils.correspondence; only argmax_2d runs), and so
is the transformers MAE helper evals/models/utils.py imports (only center_padding runs);
``glob.glob`` as spair.py calls it returns its names sorted (the official order is the
directory's listing order, which differs between file systems; the protocol reads file-name
order). main() hard-codes a data root and runs under hydra, so its loop over categories and
bins and its mean over categories (valid_rec) are driven here, on evaluate_dataset's recalls.

Needs hydra-core, omegaconf, loguru, einops (imported by the official module).
"""
from __future__ import annotations

import importlib.util
import glob as _glob
import sys
import tempfile
import types
from pathlib import Path

import numpy as np

# tests/reference/common.py, the generators' shared helpers, loaded by its path (this script lives in
# its protocol folder); it then puts the folder's tests/ on the import path for the shared inputs
_COMMON = Path(__file__).resolve().parents[3] / "tests" / "reference" / "common.py"
_spec = importlib.util.spec_from_file_location("common", _COMMON)
common = sys.modules["common"] = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(common)
common.load_folder_generator_helpers(__file__)
from test_correspondence import (PARITY_CATEGORIES, PARITY_IMAGE_SIZE, PARITY_INSTANCES, PARITY_PATCH,  # noqa: E402
                                 matching_cases, pixel_digest, standin_patch_features, write_parity_set)

REPOSITORY = "https://github.com/mbanani/probe3d"
COMMIT = "a1f14640076e38b8bc07b66d0fe2d01d15691e9d"
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
FIXTURE = "correspondence_probe3d.json"
THRESH = 0.10  # main(): thresh = 0.10
BINS = [0, 1, 2, None]


class FixedFeatures:
    """A stand-in model returning the stored (2, d, h, w) feature maps of one pair."""

    def __init__(self, torch, feats):
        self.feats = torch.tensor(np.array(feats), dtype=torch.float32)

    def __call__(self, images):
        return self.feats


def run_matching(ev, torch) -> list[dict]:
    out = []
    for case in matching_cases():
        s = case["image_size"]
        images = torch.zeros(2, 3, s, s)
        kps = [torch.tensor(k, dtype=torch.int32) for k in case["kps"]]
        masks = np.zeros((1, s, s))
        instance = (images[0], masks, kps[0], images[1], masks, kps[1], case["scale"], "x")
        err_same, _, index_same, _ = ev.compute_errors(FixedFeatures(torch, case["feats"]), instance)
        recall, _ = ev.evaluate_dataset(FixedFeatures(torch, case["feats"]), [instance], THRESH)
        out.append({**case, "error_same": err_same.double().tolist(), "index_same": index_same.tolist(),
                    "recall": recall})
    return out


def standin(torch, mutils):
    def model(images):
        return standin_patch_features(mutils.center_padding(images, PARITY_PATCH), PARITY_PATCH)

    return model


def run_dataset(ev, spair, mutils, torch, root: Path) -> tuple[dict, dict]:
    dataset_cells, e2e_cells, by_class = [], [], {}
    model = standin(torch, mutils)
    for cat in PARITY_CATEGORIES:
        recalls = []
        for vp in BINS:
            ds = spair.SPairDataset(str(root), "test", image_size=PARITY_IMAGE_SIZE, image_mean="imagenet",
                                    use_bbox=False, class_name=cat, num_instances=PARITY_INSTANCES, vp_diff=vp)
            instances = []
            for i in range(len(ds)):
                img_i, _, kps_i, img_j, _, kps_j, scale, _ = ds[i]
                instances.append({"kps_i": kps_i.tolist(), "kps_j": kps_j.tolist(), "thresh_scale": scale,
                                  "img_i": [float(img_i.double().sum()), float((img_i.double() ** 2).sum())],
                                  "img_j": [float(img_j.double().sum()), float((img_j.double() ** 2).sum())]})
            label = "all" if vp is None else vp
            dataset_cells.append({"category": cat, "viewpoint": label,
                                  "pairs": [a["filename"].replace(".json", "") for a in ds.instances],
                                  "instances": instances})
            recall = ev.evaluate_dataset(model, ds, THRESH)[0] if len(ds) > 0 else -1
            recalls.append(recall)
            e2e_cells.append({"category": cat, "viewpoint": label, "recall": recall})
        by_class[cat] = recalls
    all_recall = torch.stack([torch.tensor(by_class[c], dtype=float) for c in by_class], dim=0)
    valid = (all_recall >= 0).float()
    avg = (all_recall * valid).sum(dim=0) / valid.sum(dim=0)
    means = dict(zip(["PCK_vp0", "PCK_vp1", "PCK_vp2", "PCK"], avg.tolist()))
    return {"cells": dataset_cells}, {"cells": e2e_cells, "mean_over_categories": means}


def main() -> None:
    args = common.parse_args(__doc__, FIXTURE, REPOSITORY, COMMIT, fixtures=FIXTURES)
    import torch

    torch.Tensor.cuda = lambda self, *a, **k: self  # CPU run
    faiss = types.ModuleType("faiss")
    faiss.StandardGpuResources = lambda: None
    contrib = types.ModuleType("faiss.contrib")
    contrib.torch_utils = types.ModuleType("faiss.contrib.torch_utils")
    sys.modules.update({"faiss": faiss, "faiss.contrib": contrib, "faiss.contrib.torch_utils": contrib.torch_utils})
    ev = common.import_official(args.official, "evaluate_spair_correspondence")
    spair = common.import_official(args.official, "evals.datasets.spair")
    # evals/models/utils.py imports a MAE position-embedding helper (not in this transformers); unused
    mutils = common.import_official(args.official, "evals.models.utils", stubs={
        "transformers.models.vit_mae.modeling_vit_mae": {"get_2d_sincos_pos_embed_from_grid": None}})
    spair.glob = types.SimpleNamespace(glob=lambda pattern: sorted(_glob.glob(pattern)))
    matching = run_matching(ev, torch)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "parity"
        write_parity_set(root)
        from PIL import Image

        digests = {f"{p.parent.name}/{p.stem}": pixel_digest(Image.open(p))
                   for p in sorted((root / "JPEGImages").rglob("*.jpg"))}
        dataset, e2e = run_dataset(ev, spair, mutils, torch, root)
    dataset["pixel_sha256"] = digests
    data = {
        "provenance": common.provenance(
            args, __file__, {"thresh": THRESH, "image_size": PARITY_IMAGE_SIZE, "patch": PARITY_PATCH,
                             "num_instances": PARITY_INSTANCES, "categories": list(PARITY_CATEGORIES),
                             "use_bbox": False, "image_mean": "imagenet", "matching_seed": 11},
            ["evaluate_spair_correspondence.py", "evals/datasets/spair.py", "evals/utils/correspondence.py",
             "evals/models/utils.py"], extra_modules=("torchvision", "PIL"),
            notes="Tensor.cuda identity; faiss stubbed; spair.py's glob sorted; main()'s mean over categories "
                  "driven here on evaluate_dataset's recalls"),
        "how": "compute_errors / evaluate_dataset (thresh 0.10) with stand-in models; SPairDataset on the parity set",
        "matching": matching, "dataset": dataset, "end_to_end": e2e,
    }
    common.compare_with_committed(data, args.out)
    common.write_fixture(args.out, data)


if __name__ == "__main__":
    main()
