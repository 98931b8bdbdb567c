"""Regenerate benchmarks/dense_nn/fixtures/hbird_golden.json from open-hummingbird-eval.

Runs vpariza/open-hummingbird-eval's HbirdEvaluation (hbird/hbird_eval.py) and PredsmIoU
(hbird/utils/eval_metrics.py) unmodified on the seeded features and masks that
benchmarks/dense_nn/tests/test_dense_nn_golden.py::make_case builds: a FeatureExtractorSimple whose feature
function returns those features (looked up by an image index carried in the input tensor),
a train loader of one batch (all training images; masks as ToTensor gives them, label / 255)
and augmentation_epoch=1 (the features are the inputs: nothing to augment), then evaluate()
on one validation batch with the ignore index get_dataset sets (VOC 255, ADE20K 0).

Stubbed: pytorch_lightning (imported by the unused datamodules of hbird/data) and the
GPU-only NearestNeighborSearchFaiss, replaced by faiss-cpu IndexFlatIP (the same exact
inner-product search). Needs faiss-cpu and scipy. torch and faiss run single-threaded.
"""
from __future__ import annotations

import importlib.util  # noqa: E402
from pathlib import Path  # noqa: E402

# tests/reference/common.py (the generators' command line and provenance) by its path: a generator runs as a
# script from its folder, and a site-packages ``tests`` package can shadow tests/ by name
_COMMON = importlib.util.spec_from_file_location(
    "common", Path(__file__).resolve().parents[3] / "tests" / "reference" / "common.py")
common = importlib.util.module_from_spec(_COMMON)
_COMMON.loader.exec_module(common)  # puts the repository root and tests/ on the import path
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"  # this folder's fixtures

REPOSITORY = "https://github.com/vpariza/open-hummingbird-eval"
COMMIT = "5e79da292730edded800a89828b84f38469f5476"
VERSION = "2.0.0"  # the release this commit is (its title, README badge; setup.py still says 1.0.0)
FIXTURE = "hbird_golden.json"
IGNORE_INDEX = {"voc": 255, "ade": 0}  # hbird/data get_dataset's ignore_index_local
EVAL = dict(augmentation_epoch=1, device="cpu", nn_method="faiss", nn_params={}, beta=0.02)


def faiss_cpu_search_module():
    """A stand-in for hbird.nn.search_faiss: the same interface, an exact IndexFlatIP on the CPU."""
    import types


    mod = types.ModuleType("hbird.nn.search_faiss")
    mod.NearestNeighborSearchFaiss = common.FaissCPUSearch
    return mod


def run_case(hb, models, metrics, spec: dict) -> dict:
    import torch
    from PIL import Image
    from torchvision.transforms.functional import to_tensor

    from benchmarks.dense_nn.tests.test_dense_nn_golden import make_case

    case = make_case(spec)
    feats = [torch.from_numpy(f).reshape(-1, spec["dim"]) for f in case["train_feats"] + case["val_feats"]]
    size = spec["grid"] * spec["patch"]

    def batch(offset: int, masks):
        x = torch.zeros(len(masks), 3, size, size)
        x[:, 0, 0, 0] = torch.arange(offset, offset + len(masks), dtype=torch.float32)  # the image index
        y = torch.stack([to_tensor(Image.fromarray(m)) for m in masks])  # (n, 1, H, W), label / 255
        return x, y

    def features(model, imgs):
        return torch.stack([feats[int(i)] for i in imgs[:, 0, 0, 0]]), None

    extractor = models.FeatureExtractorSimple(torch.nn.Identity(), ftr_extr_fn=features,
                                              eval_spatial_resolution=spec["grid"], d_model=spec["dim"])
    train_loader = [batch(0, case["train_masks"])]
    val_loader = [batch(spec["n_train"], case["val_masks"])]

    metrics_seen = []

    class RecordedPredsmIoU(metrics.PredsmIoU):
        def __init__(self, *a, **k):
            super().__init__(*a, **k)
            metrics_seen.append(self)

    hb.PredsmIoU = RecordedPredsmIoU
    if spec.get("rand_seed") is not None:
        torch.manual_seed(spec["rand_seed"])  # the patch sampling of the bounded memory draws torch.rand
    evaluator = hb.HbirdEvaluation(extractor, train_loader, num_classes=spec["num_classes"], n_neighbours=spec["k"],
                                   augmentation_epoch=EVAL["augmentation_epoch"], device=EVAL["device"],
                                   nn_method=EVAL["nn_method"], nn_params=EVAL["nn_params"],
                                   memory_size=spec["memory_size"], dataset_size=spec["n_train"])
    miou = evaluator.evaluate(val_loader, eval_spatial_resolution=spec["grid"], ignore_index=IGNORE_INDEX[spec["kind"]])
    (metric,) = metrics_seen
    identity = metric.compute(is_global_zero=True, linear_probe=True)[0]
    return {"spec": spec, "miou_hungarian": float(miou), "miou_identity": float(identity),
            "memory_rows": int(evaluator.feature_memory.shape[0]),
            "ignore_index_reference": IGNORE_INDEX[spec["kind"]]}


def main() -> None:
    args = common.parse_args(__doc__, FIXTURE, REPOSITORY, COMMIT, fixtures=FIXTURES, threads=1)
    import faiss
    import torch

    faiss.omp_set_num_threads(1)
    lightning_stub = {"LightningDataModule": object}
    hb = common.import_official(args.official, "hbird.hbird_eval",
                                stubs={"pytorch_lightning": lightning_stub,
                                       "hbird.nn.search_faiss": faiss_cpu_search_module().__dict__})
    models = common.import_official(args.official, "hbird.models")
    metrics = common.import_official(args.official, "hbird.utils.eval_metrics")

    from benchmarks.dense_nn.tests.test_dense_nn_golden import CASES

    cases = {name: run_case(hb, models, metrics, spec) for name, spec in CASES.items()}
    how = ("Inputs are built by make_case() in benchmarks/dense_nn/tests/test_dense_nn_golden.py from the seeds in "
           "each case's spec (numpy "
           "default_rng). The reference's HbirdEvaluation (hbird/hbird_eval.py) was constructed by "
           "benchmarks/dense_nn/reference/gen_hbird_golden.py with a FeatureExtractorSimple whose feature function "
           "returns these "
           "features (looked up by an index carried in the input tensor), a train loader of one batch (all training "
           "images; masks as ToTensor gives them, label/255) and augmentation_epoch=1 (no augmentation: the "
           "features are the inputs), then evaluate() on one validation batch (ignore_index 255 for 'voc' cases, 0 "
           "for 'ade' cases, as get_dataset sets them). Stubbed: pytorch_lightning (unused datamodules) and the "
           "GPU-only NearestNeighborSearchFaiss, replaced by faiss-cpu IndexFlatIP (same exact inner-product "
           "search). For the memory-cap case torch.manual_seed(rand_seed) was called before building the memory; "
           "the harness test draws the same U(0,1) stream from torch.Generator().manual_seed(rand_seed). "
           "miou_hungarian is what evaluate() returns (PredsmIoU.compute default); miou_identity is "
           "PredsmIoU.compute(linear_probe=True) on the same confusion matrix. torch and faiss ran single-threaded; "
           f"torch {torch.__version__}, faiss-cpu {faiss.__version__}.")
    data = {
        "provenance": common.provenance(
            args, __file__,
            {"cases": CASES, "inputs": "benchmarks/dense_nn/tests/test_dense_nn_golden.py::make_case",
             "ignore_index": IGNORE_INDEX,
             "HbirdEvaluation": EVAL, "faiss_threads": 1, "version": VERSION},
            ["hbird/hbird_eval.py", "hbird/models.py", "hbird/utils/eval_metrics.py"],
            extra_modules=("faiss", "scipy", "torchvision")),
        "reference": {"repo": "vpariza/open-hummingbird-eval", "version": VERSION, "commit": args.commit},
        "how": how,
        "cases": cases,
    }
    common.finish(args, data)


if __name__ == "__main__":
    main()
