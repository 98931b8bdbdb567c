"""Regenerate benchmarks/correspondence/fixtures/correspondence_navi_probe3d.json (+ its
correspondence_navi_probe3d_features.npz) from Probe3D's own NAVI correspondence evaluation.

Runs mbanani/probe3d's ``evals.datasets.navi.NAVI`` unmodified, as evaluate_navi_correspondence.py
builds it (configs/dataset/navi.yaml: image_mean imagenet, augment_train True (off for the test
split), bbox_crop True; ``pair_dataset=True``), on NAVI SynthScenes
(benchmarks/correspondence/synthetic_navi.py: the objects, views and seed of PARITY_SET and
PARITY_SEED in benchmarks/correspondence/tests/test_correspondence_navi.py, written to a temporary
folder); then the body of that script's ``main`` (configs/navi_correspondence.yaml: scale_factor
0.25, num_corr 1000) with the official ``estimate_correspondence_xyz``, ``transform_points_Rt``,
``project_3dto2d``, ``so3_rotation_angle`` and ``compute_binned_performance``, on stand-in feature
maps (``pooled_features`` of the test module: each 32x32 patch's mean and mean squared normalised
colour, a (6, 16, 16) map per frame), stored in the .npz so that the test feeds them rather than
recomputing them.

Recorded: the pairs drawn; per frame the normalised image and the point grid (sums, sums of squares,
sampled values); per pair the relative pose, view 1's focal length, the relative angle, the points
with depth on the 128x128 grid, and the 3D and 2D errors (sums and the first values, in Probe3D's
order: by ratio-test weight); the six recalls and the four rotation bins as the script logs them.

Substituted: ``glob.glob`` and ``os.listdir`` as navi.py calls them return their names sorted (the
official order is the file system's listing order; the reader here sorts). ``faiss`` (imported by
evals/utils/correspondence.py for its GPU index) is a stand-in with the same interface whose
``GpuIndexFlatL2.search`` is an exact L2 search in torch on the CPU (faiss's flat index is exact
too; only near-ties can order differently). The model and the CUDA calls of ``main`` are not run:
the stored feature maps take the model's place. Needs albumentations and opencv-python-headless.
"""
from __future__ import annotations

import importlib.util
import sys
import glob as _glob
import os as _os
import tempfile
import types
from pathlib import Path

# tests/reference/common.py, the generators' shared helpers, loaded by its path (this script lives in
# its protocol folder); it then puts the folder's tests/ on the import path for the shared inputs
_COMMON = Path(__file__).resolve().parents[3] / "tests" / "reference" / "common.py"
_spec = importlib.util.spec_from_file_location("common", _COMMON)
common = sys.modules["common"] = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(common)
common.load_folder_generator_helpers(__file__)

REPOSITORY = "https://github.com/mbanani/probe3d"
COMMIT = "a1f14640076e38b8bc07b66d0fe2d01d15691e9d"
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
FIXTURE = "correspondence_navi_probe3d.json"
FEATURES = "correspondence_navi_probe3d_features.npz"
SCALE_FACTOR = 0.25
NUM_CORR = 1000
SAMPLES = 64
FIRST = 32


class ExactFlatL2:
    """faiss.GpuIndexFlatL2's interface: add(target), search(query, k) -> (squared L2, indices)."""

    def __init__(self, res, dim):
        self.target = None

    def add(self, target):
        self.target = target

    def search(self, query, k):
        import torch

        d = (query * query).sum(1)[:, None] + (self.target * self.target).sum(1)[None] - 2 * query @ self.target.T
        dist, idx = torch.topk(d, k, dim=1, largest=False)
        return dist, idx


def faiss_stubs() -> dict[str, dict]:
    return {"faiss": {"StandardGpuResources": lambda: None, "GpuIndexFlatL2": ExactFlatL2},
            "faiss.contrib": {}, "faiss.contrib.torch_utils": {}}


def sampled(t, torch) -> dict:
    flat = t.detach().double().flatten()
    idx = torch.linspace(0, flat.numel() - 1, SAMPLES).round().long()
    return {"shape": list(t.shape), "sum": float(flat.sum()), "sum_sq": float((flat ** 2).sum()),
            "index": idx.tolist(), "values": flat[idx].tolist()}


def errors_summary(e) -> dict:
    return {"n": int(e.numel()), "sum": float(e.double().sum()), "first": e[:FIRST].double().tolist()}


def evaluate(items, feats_0, feats_1, corr, tr, torch, F):
    """evaluate_navi_correspondence.py main(), after feature extraction, per pair."""
    pairs, err_3d, err_2d = [], [], []
    rt_gt = torch.stack([it["Rt_01"] for it in items]).float()[:, :3, :4]
    for i, it in enumerate(items):
        xyz_0 = F.interpolate(it["xyz_grid_0"][None], scale_factor=SCALE_FACTOR, mode="nearest")[0]
        xyz_1 = F.interpolate(it["xyz_grid_1"][None], scale_factor=SCALE_FACTOR, mode="nearest")[0]
        c_xyz0, c_xyz1, _, _, _ = corr.estimate_correspondence_xyz(feats_0[i], feats_1[i], xyz_0, xyz_1, NUM_CORR)
        in_1 = tr.transform_points_Rt(c_xyz0, rt_gt[i].float())
        e3 = (in_1 - c_xyz1).norm(p=2, dim=1)
        k = it["intrinsics_1"].float()
        e2 = (corr.project_3dto2d(in_1, k) - corr.project_3dto2d(c_xyz1, k)).norm(p=2, dim=1)
        err_3d.append(e3)
        err_2d.append(e2)
        pairs.append({"pair_id": it["pair_id"], "rt_01": rt_gt[i].double().tolist(), "focal_1": float(k[0, 0]),
                      "valid_0": int((xyz_0[2] > 0).sum()), "valid_1": int((xyz_1[2] > 0).sum()),
                      "err_3d": errors_summary(e3), "err_2d": errors_summary(e2)})
    err_3d, err_2d = torch.stack(err_3d).float(), torch.stack(err_2d).float()
    results = {f"recall_{round(th * 100)}cm": float(100 * (err_3d < th).float().mean()) for th in (0.01, 0.02, 0.05)}
    results.update({f"recall_{th}px": float(100 * (err_2d < th).float().mean()) for th in (5, 25, 50)})
    angles = tr.so3_rotation_angle(rt_gt[:, :3, :3]) * 180.0 / 3.141592653589793
    for p, a in zip(pairs, angles.tolist()):
        p["angle"] = a
    binned = corr.compute_binned_performance((err_3d < 0.02).float().mean(dim=1), angles, [0, 30, 60, 90, 120])
    for name, value in zip(("0_30", "30_60", "60_90", "90_120"), binned):
        results[f"recall_2cm_{name}"] = float(value * 100)
    return pairs, results


def main() -> None:
    args = common.parse_args(__doc__, FIXTURE, REPOSITORY, COMMIT, fixtures=FIXTURES)
    import numpy as np
    import torch
    import torch.nn.functional as F

    torch.set_num_threads(args.threads)
    from test_correspondence_navi import PARITY_SEED, PARITY_SET, pooled_features, write_parity_set

    navi = common.import_official(args.official, "evals.datasets.navi")
    navi.glob = types.SimpleNamespace(glob=lambda pattern: sorted(_glob.glob(pattern)))
    navi.os = types.SimpleNamespace(listdir=lambda p: sorted(_os.listdir(p)), path=_os.path)
    corr = common.import_official(args.official, "evals.utils.correspondence", stubs=faiss_stubs())
    tr = common.import_official(args.official, "evals.utils.transformations")
    with tempfile.TemporaryDirectory() as tmp:
        root = write_parity_set(Path(tmp) / "navi")
        ds = navi.NAVI(str(root), "test", image_mean="imagenet", augment_train=True, bbox_crop=True,
                       pair_dataset=True)
        items = [ds[i] for i in range(len(ds))]
    feats_0 = torch.stack([pooled_features(it["image_0"]) for it in items])
    feats_1 = torch.stack([pooled_features(it["image_1"]) for it in items])
    with torch.no_grad():
        pairs, results = evaluate(items, feats_0, feats_1, corr, tr, torch, F)
    frames = [{"image": sampled(it[f"image_{j}"], torch), "xyz_grid": sampled(it[f"xyz_grid_{j}"], torch)}
              for it in items[:2] for j in (0, 1)]
    data = {
        "provenance": common.provenance(
            args, __file__, {"dataset": f"NAVI SynthScenes, {PARITY_SET.objects} objects x {PARITY_SET.wild_views} "
                                        f"wild_set views, seed {PARITY_SEED}", "split": "test",
                             "image_mean": "imagenet", "augment_train": True, "bbox_crop": True,
                             "pair_dataset": True, "scale_factor": SCALE_FACTOR, "num_corr": NUM_CORR,
                             "features": "pooled_features (benchmarks/correspondence/tests/"
                                         "test_correspondence_navi.py), stored in " + FEATURES},
            common.loaded_official_files(args.official), extra_modules=("albumentations", "cv2", "torchvision"),
            notes="glob.glob and os.listdir in navi.py sorted; faiss replaced by an exact torch L2 search"),
        "how": "evals.datasets.navi.NAVI pairs and evaluate_navi_correspondence.py main's loop on stored features",
        "features": FEATURES,
        "instances": [list(x) for x in ds.instances],
        "pairs": pairs, "frames": frames, "results": results,
    }
    common.compare_with_committed(data, args.out)
    common.write_fixture(args.out, data)
    np.savez_compressed(args.out.parent / FEATURES, feats_0=feats_0.numpy(), feats_1=feats_1.numpy())


if __name__ == "__main__":
    main()
