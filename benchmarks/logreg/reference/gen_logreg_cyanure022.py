"""Regenerate benchmarks/logreg/fixtures/logreg_cyanure022.json from the official iBOT code under cyanure 0.22.

Runs bytedance/ibot evaluation/eval_logistic_regression.py ``logistic_regression(train_features,
train_labels, test_features, test_labels, lambd, args)`` unmodified, with args.it0 = 10 and
args.epochs = 100 (the script's defaults), for each lambda, on seeded Gaussian-blob features that
are L2-normalised in float32 as the script's ``extract_feature_pipeline`` normalises them. The
official function needs cyanure's 0.2x API (``MultiClassifier``), which the current cyanure no
longer has: it runs in a separate interpreter (``--cyanure-python``, a venv holding
cyanure-openblas 0.22.post1 built from its sdist after ``apt-get install libopenblas-dev``, plus
numpy<2 and scipy):

    python -m venv CYANURE022_VENV
    CYANURE022_VENV/bin/pip install "numpy<2" scipy setuptools wheel
    CYANURE022_VENV/bin/pip install --no-build-isolation cyanure-openblas==0.22.post1
    python benchmarks/logreg/reference/gen_logreg_cyanure022.py --official <ibot checkout> \
        --cyanure-python CYANURE022_VENV/bin/python

That interpreter has no torch: the script's imports of torch, torchvision and the iBOT model and
data code (used only by its feature extraction) are stubbed there. The classifier the official
function builds is observed (not changed) to also record its test predictions and weights. The
features go to logreg_cyanure022_features.npz beside the fixture (its sha256 in the fixture).
"""
from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

REPOSITORY = "https://github.com/bytedance/ibot"
COMMIT = "da316d82636a7a7356835ef224b13d5f3ace0489"
FIXTURE = "logreg_cyanure022.json"
FEATURES = "logreg_cyanure022_features.npz"
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"  # this folder's fixtures
SEED = 12
LAMBDAS = [0.001, 0.01, 0.1, 1.0]  # the script's sweep [0.01, 0.1, 1] and one weaker penalty
# (name, train images, test images, dimension, classes, spread of the class means)
# (spreads chosen so that test accuracy lies well inside (0, 1) and moves with lambda)
SETS = [("blobs_c10", 300, 150, 24, 10, 0.12), ("blobs_c5_hard", 200, 100, 16, 5, 0.1),
        ("blobs_c20", 400, 200, 24, 20, 0.12)]


def runner(official: str, npz: str) -> None:
    """In the cyanure 0.22 interpreter: run the official function, print JSON."""
    import argparse
    import importlib.util
    import types

    import numpy as np

    class _Any(types.ModuleType):
        def __getattr__(self, name):  # decorators and attributes the module touches at import
            return (lambda *a, **k: (a[0] if a and callable(a[0]) else (lambda f: f)))

    for name in ("torch", "torch.distributed", "torch.backends", "torch.backends.cudnn", "torch.nn", "torchvision",
                 "torchvision.transforms", "utils", "models", "loader"):
        sys.modules[name] = _Any(name)
    for name in list(sys.modules):  # submodules as attributes of their parents
        if name.count(".") and name.split(".")[0] in ("torch", "torchvision"):
            parent, child = name.rsplit(".", 1)
            if isinstance(sys.modules[parent], _Any):
                setattr(sys.modules[parent], child, sys.modules[name])
    # loaded from its file (its own imports are the stubs above): the import path is left alone
    path = Path(official) / "evaluation" / "eval_logistic_regression.py"
    spec = importlib.util.spec_from_file_location("eval_logistic_regression", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    import cyanure

    built = []

    class Observed(cyanure.MultiClassifier):  # the official class, its instances kept for reading
        def __init__(self, *a, **k):
            super().__init__(*a, **k)
            built.append(self)

    mod.ars = types.SimpleNamespace(MultiClassifier=Observed)
    data = np.load(npz)
    out = {"cyanure": getattr(cyanure, "__version__", "0.22.post1"), "numpy": np.__version__, "sets": {}}
    args = argparse.Namespace(it0=10, epochs=100)
    for name, *_ in SETS:
        tx, ty, vx, vy = (data[f"{name}_{p}"] for p in ("train_x", "train_y", "test_x", "test_y"))
        rows = []
        for lambd in LAMBDAS:
            acc = mod.logistic_regression(tx, ty, vx, vy, lambd, args)
            clf = built[-1]
            rows.append({"lambda": lambd, "accuracy": float(acc),
                         "predictions": np.asarray(clf.predict(vx)).astype(int).tolist(),
                         "weights": np.asarray(clf.w, dtype=np.float64).astype(np.float32).tolist()})
        out["sets"][name] = rows
    print("RESULT " + json.dumps(out))


def make_features(rng, n_train, n_test, d, classes, spread):
    import numpy as np

    means = rng.normal(0, spread, (classes, d))
    def draw(n):
        y = np.arange(n) % classes
        rng.shuffle(y)
        x = (means[y] + rng.normal(0, 1 / np.sqrt(d), (n, d))).astype(np.float32)
        x = x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)  # F.normalize(dim=1, p=2)
        return x.astype(np.float32), y.astype(np.int64)
    return (*draw(n_train), *draw(n_test))


def load_common():
    """tests/reference/common.py (the generators' command line and provenance) by its path: a generator runs as
    a script from its folder, and a site-packages ``tests`` package can shadow tests/ by name. Loaded in
    main() only: the runner's interpreter has no torch."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "common", Path(__file__).resolve().parents[3] / "tests" / "reference" / "common.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # puts the repository root and tests/ on the import path
    return module


def main() -> None:
    common = load_common()
    import numpy as np

    args = common.parse_args(__doc__, FIXTURE, REPOSITORY, COMMIT, fixtures=FIXTURES, extra=lambda p: p.add_argument(
        "--cyanure-python", required=True,
        help="an interpreter with cyanure-openblas 0.22.post1, numpy and scipy (no torch needed)"))
    rng = np.random.default_rng(SEED)
    arrays = {}
    for name, n_train, n_test, d, classes, spread in SETS:
        for part, a in zip(("train_x", "train_y", "test_x", "test_y"), make_features(rng, n_train, n_test, d,
                                                                                    classes, spread)):
            arrays[f"{name}_{part}"] = a
    npz = args.out.parent / FEATURES
    np.savez_compressed(npz, **arrays)
    proc = subprocess.run([args.cyanure_python, __file__, "--runner", str(args.official), str(npz)],
                          capture_output=True, text=True)
    line = [x for x in proc.stdout.splitlines() if x.startswith("RESULT ")]
    if proc.returncode or not line:
        raise SystemExit(f"the cyanure 0.22 run failed:\n{proc.stderr[-3000:]}")
    result = json.loads(line[-1][len("RESULT "):])
    how = (f"bytedance/ibot@{args.commit} evaluation/eval_logistic_regression.py logistic_regression() run unmodified "
           f"under cyanure-openblas {result['cyanure']} (numpy {result['numpy']}) with args.it0=10, args.epochs=100, "
           "for each lambda, on the float32 L2-normalised features of the .npz; accuracy is the function's return "
           "value (cyanure's score, a fraction); predictions and weights read from the classifier it built.")
    data = {"provenance": common.provenance(args, __file__, {"seed": SEED, "lambdas": LAMBDAS, "sets": SETS,
                                                             "it0": 10, "epochs": 100,
                                                             # the interpreter's folder is this machine's
                                                             "cyanure_python": "CYANURE022_VENV/bin/python",
                                                             "cyanure": result["cyanure"]},
                                            ["evaluation/eval_logistic_regression.py"]),
            "how": how, "features": FEATURES,
            "features_sha256": hashlib.sha256(npz.read_bytes()).hexdigest(), "sets": result["sets"]}
    common.finish(args, data)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--runner":
        runner(sys.argv[2], sys.argv[3])
    else:
        main()
