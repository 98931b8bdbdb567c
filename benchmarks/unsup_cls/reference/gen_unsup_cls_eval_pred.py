"""Regenerate benchmarks/unsup_cls/fixtures/unsup_cls_eval_pred.json from the official iBOT code.

Runs bytedance/ibot evaluation/unsupervised/unsup_cls.py ``eval_pred(label, pred, calc_acc=True)``
unmodified (scikit-learn's NMI, ARI, FMI; Munkres matching in ``get_y_preds``) on seeded random
cluster assignments: noisy relabellings with K = C clusters, a perfect permuted one, assignments
that never use cluster 0 (get_y_preds shifts the cluster values), and labellings with a class
missing (where the official indexing fails, recorded as the error it raises). Needs
``pip install scikit-learn munkres`` (not dependencies of ssl-bench). The official module's other
imports (utils, models, loader: the model and data code) are stubbed: eval_pred does not use them.
"""
from __future__ import annotations

import hashlib

import importlib.util  # noqa: E402
from pathlib import Path  # noqa: E402

# tests/reference/common.py (the generators' command line and provenance) by its path: a generator runs as a
# script from its folder, and a site-packages ``tests`` package can shadow tests/ by name
_COMMON = importlib.util.spec_from_file_location(
    "common", Path(__file__).resolve().parents[3] / "tests" / "reference" / "common.py")
common = importlib.util.module_from_spec(_COMMON)
_COMMON.loader.exec_module(common)  # puts the repository root and tests/ on the import path
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"  # this folder's fixtures

REPOSITORY = "https://github.com/bytedance/ibot"
COMMIT = "da316d82636a7a7356835ef224b13d5f3ace0489"
FIXTURE = "unsup_cls_eval_pred.json"
SEED = 47
# (name, classes, images, share of images relabelled at random, how the assignment is built)
CASES = [("noisy_c2", 2, 300, 0.4, "noisy"), ("noisy_c10", 10, 1000, 0.5, "noisy"),
         ("noisy_c10_heavy", 10, 600, 0.9, "noisy"), ("noisy_c50", 50, 2000, 0.6, "noisy"),
         ("perfect_permuted_c7", 7, 350, 0.0, "noisy"), ("uniform_c20", 20, 800, 1.0, "noisy"),
         ("no_cluster_zero_c10", 10, 700, 0.5, "no_zero"), ("no_cluster_zero_c5", 5, 400, 0.2, "no_zero"),
         ("class_missing_c8", 8, 500, 0.5, "class_missing"), ("class_zero_missing_c6", 6, 400, 0.3, "class0_missing"),
         # unsup_cls.py's val loader has no DistributedSampler: on the README's 8 GPUs every rank scores all
         # of val and concat_all_gather stacks 8 copies of the labels and predictions
         ("eight_copies_c10", 10, 600, 0.5, "copies8"), ("eight_copies_c50", 50, 1500, 0.6, "copies8")]


def assignment(rng, classes: int, n: int, noise: float, kind: str):
    import numpy as np

    labels = rng.integers(0, classes, n)
    if kind == "class_missing":  # the last class has no image; clusters still use all values
        labels = rng.integers(0, classes - 1, n)
    if kind == "class0_missing":
        labels = rng.integers(1, classes, n)
    perm = rng.permutation(classes)
    clusters = perm[labels]
    flip = rng.random(n) < noise
    clusters[flip] = rng.integers(0, classes, int(flip.sum()))
    if kind == "no_zero":
        clusters[clusters == 0] = 1 + rng.integers(0, classes - 1, int((clusters == 0).sum()))
    return labels.astype(np.int64), clusters.astype(np.int64)


def arrays_sha256(labels, clusters) -> str:
    h = hashlib.sha256()
    for a in (labels, clusters):
        h.update(a.astype("<i8").tobytes())
    return h.hexdigest()


def main() -> None:
    args = common.parse_args(__doc__, FIXTURE, REPOSITORY, COMMIT, fixtures=FIXTURES)
    import numpy as np

    stub = {"utils": {}, "models": {}, "models.head": {"DINOHead": None}, "loader": {"ImageFolder": None}}
    official = common.import_official(args.official / "evaluation" / "unsupervised", "unsup_cls", stub)
    rng = np.random.default_rng(SEED)
    cases = []
    for name, classes, n, noise, kind in CASES:
        labels, clusters = assignment(rng, classes, n, noise, kind)
        case = {"name": name, "classes": classes, "kind": kind, "noise": noise,
                "labels": labels.tolist(), "clusters": clusters.tolist(),
                "inputs_sha256": arrays_sha256(labels, clusters)}
        copies = 8 if kind == "copies8" else 1
        case["copies"] = copies  # the official function ran on this many stacked copies
        y_run, p_run = np.tile(labels, copies), np.tile(clusters, copies)
        try:
            nmi, ari, f, acc = official.eval_pred(y_run, p_run, calc_acc=True)
            case["official"] = {"NMI": float(nmi), "ARI": float(ari), "FMI": float(f), "ACC": float(acc)}
        except IndexError as exc:
            nmi, ari, f, _ = official.eval_pred(y_run, p_run, calc_acc=False)
            case["official"] = {"NMI": float(nmi), "ARI": float(ari), "FMI": float(f)}
            case["official_acc_error"] = f"IndexError: {exc}"
        cases.append(case)
    how = (f"bytedance/ibot@{args.commit} evaluation/unsupervised/unsup_cls.py eval_pred(label, pred, calc_acc=True) "
           "run unmodified on numpy int64 arrays drawn with numpy.random.default_rng(SEED): labels uniform over the "
           "classes, clusters a random permutation of the labels with a share `noise` of images reassigned uniformly; "
           "the official function ran on `copies` stacked copies of them (np.tile). "
           "Where get_y_preds raises IndexError the three other scores come from calc_acc=False.")
    data = {"provenance": common.provenance(args, __file__, {"seed": SEED, "cases": CASES},
                                            ["evaluation/unsupervised/unsup_cls.py"],
                                            extra_modules=("sklearn", "munkres")),
            "how": how, "cases": cases}
    common.finish(args, data)


if __name__ == "__main__":
    main()
