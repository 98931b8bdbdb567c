"""Regenerate benchmarks/transfer/fixtures/transfer_synclr.json (and transfer_synclr_features.npz) from SynCLR's
linear-transfer script, google-research/syn-rep-learn SynCLR/eval/main_downstream_linear.py.

Runs, unmodified, on seeded inputs:

- ``load_features(npz, normalize=True)`` and ``lbfgs_gpu(data_dict, metric=...)`` (standardisation,
  the C sweep over ``torch.logspace(-6, 5, 45)``, the strictly-better selection on val, the refit on
  train+val, the three metrics) for one data set of each metric: top-1 (5 classes), mean per-class
  accuracy (6 unbalanced classes) and VOC 11-point mAP (20 labels, as ``NUM_VOC_CLASSES``). The
  features are written to ``transfer_synclr_features.npz`` in the script's own key layout
  (``X_train_feature`` ...), one file per case in the npz's ``<case>/`` keys; the test feeds the
  same arrays to the harness.
- ``voc_eval_cls`` (sklearn ``precision_recall_curve`` + ``voc_ap``) on scores with ties.
- ``get_train_valid_loader`` for a data set without its own validation split (the held-out 20%,
  ``np.random.seed(0)``): the train and val indices of its two ``SubsetRandomSampler``s.

Substitutions (none changes what is measured here): cuML's GPU ``LogisticRegression`` is replaced by
sklearn's ``LogisticRegression(solver="lbfgs")`` with the same C, max_iter and tol (cuML needs a GPU;
its objective, mean loss + l2/(2 C n) ||w||^2, is sklearn's divided by n), and every ``set_params``
call is recorded (the last one is the C chosen); ``six`` (only the VOC download helper uses it) is
stubbed. The data set class given to ``get_train_valid_loader`` is a stand-in of n items.

    git clone https://github.com/google-research/syn-rep-learn /tmp/official/syn-rep-learn
    python benchmarks/transfer/reference/gen_transfer_synclr.py --official /tmp/official/syn-rep-learn
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

import importlib.util  # noqa: E402

# tests/reference/common.py (the generators' command line and provenance) by its path: a generator runs as a
# script from its folder, and a site-packages ``tests`` package can shadow tests/ by name
_COMMON = importlib.util.spec_from_file_location(
    "common", Path(__file__).resolve().parents[3] / "tests" / "reference" / "common.py")
common = importlib.util.module_from_spec(_COMMON)
_COMMON.loader.exec_module(common)  # puts the repository root and tests/ on the import path
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"  # this folder's fixtures
finish = common.finish
import_official = common.import_official
loaded_official_files = common.loaded_official_files
parse_args = common.parse_args
provenance = common.provenance

REPOSITORY = "https://github.com/google-research/syn-rep-learn"
COMMIT = "45f451b0d53d25eecdb4d7b9e5a852e1c43e7f5b"
FIXTURE = "transfer_synclr.json"
FEATURES = "transfer_synclr_features.npz"
SEED = 47
# (case, metric, classes, dimension, n_train, n_val, n_test, spread of the class means)
CASES = [("top1_c5", "ACC", 5, 40, 80, 40, 80, 0.5), ("mean_class_c6", "MEAN_CLS_ACC", 6, 10, 120, 48, 90, 0.8),
         ("map_voc20", "MEAN_AP", 20, 16, 90, 40, 80, 1.2)]
CARVE_SIZES = [37, 100, 3680]


def blobs(rng, classes, dim, n, spread, means, weights):
    """Gaussian blobs around ``means`` with unbalanced class frequencies (float32)."""
    y = rng.choice(classes, size=n, p=weights)
    return (means[y] * spread + rng.normal(size=(n, dim))).astype(np.float32), y.astype(np.int64)


def multi_label(rng, dim, n, spread, means):
    """20 labels, each image holding 1-3 of them; its features the sum of their means plus noise."""
    y = np.zeros((n, 20), dtype=np.int64)
    for i in range(n):
        y[i, rng.choice(20, size=int(rng.integers(1, 4)), replace=False)] = 1
    y[np.arange(n), np.arange(n) % 20] = 1  # every label in every set
    return (y @ means * spread + rng.normal(size=(n, dim))).astype(np.float32), y


def make_case(rng, metric, classes, dim, n_train, n_val, n_test, spread) -> dict:
    means = rng.normal(size=(classes, dim))
    weights = np.linspace(1.0, 2.0, classes) / np.linspace(1.0, 2.0, classes).sum()
    sets = {}
    for name, n in (("train", n_train), ("val", n_val), ("test", n_test)):
        sets[name] = (multi_label(rng, dim, n, spread, means) if metric == "MEAN_AP"
                      else blobs(rng, np.arange(classes), dim, n, spread, means, weights))
    out = {f"X_{k}_feature": v[0] for k, v in sets.items()} | {f"y_{k}": v[1] for k, v in sets.items()}
    out["X_trainval_feature"] = np.concatenate([sets["train"][0], sets["val"][0]])
    out["y_trainval"] = np.concatenate([sets["train"][1], sets["val"][1]])
    return out


def recording_logreg(calls: list):
    from sklearn.linear_model import LogisticRegression

    class SklearnForCuml:
        """cuML's constructor arguments; sklearn's lbfgs solves the same objective."""

        def __init__(self, max_iter=1000, output_type=None, tol=1e-4, linesearch_max_iter=50):
            self.clf = LogisticRegression(solver="lbfgs", max_iter=max_iter, tol=tol)

        def set_params(self, **kw):
            calls.append(float(kw["C"]))
            self.clf.set_params(**kw)

        def __getattr__(self, name):
            return getattr(self.clf, name)

    return SklearnForCuml


def run_cases(mod, calls, npz_path: Path) -> dict:
    import tempfile

    rng = np.random.default_rng(SEED)
    stored, results = {}, {}
    for case, metric, *shape in CASES:
        arrays = make_case(rng, metric, *shape)
        with tempfile.TemporaryDirectory() as tmp:
            one = Path(tmp) / f"{case}.npz"
            np.savez(one, **arrays)  # the file the script's load_features reads
            calls.clear()
            score = mod.lbfgs_gpu(mod.load_features(str(one), normalize=True), metric=getattr(mod.MetricMode, metric))
        results[case] = {"metric": metric, "test_score": float(score), "c_chosen": calls[-1],
                         "c_sweep": calls[:-1]}
        stored.update({f"{case}/{k}": v for k, v in arrays.items()})
    np.savez_compressed(npz_path, **stored)
    return results


def run_ap(mod) -> dict:
    rng = np.random.default_rng(SEED + 1)
    out = []
    for n in (30, 61):
        scores = np.round(rng.normal(size=n) * 4) / 4  # a quarter grid: many ties
        labels = (rng.random(n) < 0.35).astype(np.int64)
        out.append({"scores": scores.tolist(), "labels": labels.tolist(),
                    "ap": float(mod.voc_eval_cls(labels, scores))})
    return {"cases": out}


def run_carve(mod) -> dict:
    class Items:
        def __init__(self, root, train=True, transform=None, download=False):
            self.n = int(Path(root).name)

        def __len__(self):
            return self.n

    out = {}
    for n in CARVE_SIZES:
        train, val, _ = mod.get_train_valid_loader(Items, f"/n/{n}", {"mean": [0.0] * 3, "std": [1.0] * 3}, 8, 224,
                                                   random_seed=0)
        out[str(n)] = {"train": [int(i) for i in train.sampler.indices], "val": [int(i) for i in val.sampler.indices]}
    return out


def main() -> None:
    args = parse_args(__doc__, FIXTURE, REPOSITORY, COMMIT, fixtures=FIXTURES, threads=1)
    calls: list[float] = []
    stubs = {"cuml": {}, "cuml.linear_model": {"LogisticRegression": recording_logreg(calls)},
             "six": {}, "six.moves": {}, "six.moves.urllib": {}, "six.moves.urllib.parse": {"urlparse": None},
             "six.moves.urllib.request": {"urlretrieve": None}}
    mod = import_official(args.official / "SynCLR" / "eval", "main_downstream_linear", stubs)
    npz = args.out.parent / FEATURES
    data = {"how": "official functions on seeded inputs; see the generator's docstring",
            "lbfgs": run_cases(mod, calls, npz), "voc_eval_cls": run_ap(mod), "carve": run_carve(mod)}
    import hashlib

    import sklearn

    data["features_sha256"] = hashlib.sha256(npz.read_bytes()).hexdigest()
    files = [f"SynCLR/eval/{f}" for f in loaded_official_files(args.official / "SynCLR" / "eval")]
    data["provenance"] = provenance(args, __file__, {"seed": SEED, "cases": CASES, "carve_sizes": CARVE_SIZES,
                                                     "solver": "sklearn LogisticRegression lbfgs for cuML",
                                                     "sklearn": sklearn.__version__}, files)
    finish(args, data)


if __name__ == "__main__":
    assert FIXTURES.is_dir()
    main()
