"""Regenerate benchmarks/classification/fixtures/knn_dino_golden.json from the official DINO code.

Runs facebookresearch/dino eval_knn.knn_classifier unmodified on seeded random features
(benchmarks/classification/tests/test_knn.py::golden_features builds them, from the seeds and sizes
below), L2-normalised as DINO's pipeline does, for k in 10, 20, 100, 200.

top5_zero_vote_hits: DINO's top-5 hits whose class received no vote. knn_classifier does not
report them; to count them its ``probs.sort(1, True)`` call is observed (Tensor.sort wrapped
while it runs, returning what sort returns) and the hits read off the scores it sorted.
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

REPOSITORY = "https://github.com/facebookresearch/dino"
COMMIT = "7c446df5b9f45747937fb0d72314eb9f7b66930a"
FIXTURE = "knn_dino_golden.json"
CASES = [
    dict(name="c10_d64", seed=1, n_train=2000, n_test=537, dim=64, num_classes=10, noise=2.5, temperature=0.07),
    dict(name="c100_d128", seed=2, n_train=5000, n_test=250, dim=128, num_classes=100, noise=3.0, temperature=0.07),
    dict(name="c1000_d384", seed=3, n_train=20000, n_test=1000, dim=384, num_classes=1000, noise=3.0,
         temperature=0.07),
    dict(name="c100_d128_T0.1", seed=4, n_train=4000, n_test=333, dim=128, num_classes=100, noise=3.0,
         temperature=0.1),
]
KS = (10, 20, 100, 200)


def run_case(eval_knn, case: dict) -> dict:
    import torch
    from torch import nn

    from benchmarks.classification.tests.test_knn import features_sha256, golden_features

    train, train_labels, test, test_labels = golden_features(case)
    train_n = nn.functional.normalize(train, dim=1, p=2)
    test_n = nn.functional.normalize(test, dim=1, p=2)
    dino = {}
    for k in KS:
        sorted_scores = []
        sort = torch.Tensor.sort

        def observed_sort(self, *a, **kw):
            out = sort(self, *a, **kw)
            sorted_scores.append((self.clone(), out[1].clone()))
            return out

        torch.Tensor.sort = observed_sort
        try:
            top1, top5 = eval_knn.knn_classifier(train_n, train_labels, test_n, test_labels, k,
                                                 case["temperature"], case["num_classes"])
        finally:
            torch.Tensor.sort = sort
        probs = torch.cat([p for p, _ in sorted_scores])
        predictions = torch.cat([i for _, i in sorted_scores])
        assert len(probs) == case["n_test"], "knn_classifier sorted scores for another number of images"
        top = predictions[:, :min(5, k)]
        hit = top.eq(test_labels.view(-1, 1))
        zero = probs.gather(1, top) == 0
        dino[str(k)] = {"top1": top1, "top5": top5, "top5_zero_vote_hits": int((hit & zero).sum())}
    return {**case, "features_sha256": features_sha256(train, train_labels, test, test_labels), "dino": dino}


def main() -> None:
    args = common.parse_args(__doc__, FIXTURE, REPOSITORY, COMMIT, fixtures=FIXTURES)
    import torch

    eval_knn = common.import_official(args.official, "eval_knn")
    cases = [run_case(eval_knn, c) for c in CASES]
    how = ("DINO's own knn_classifier (facebookresearch/dino eval_knn.py at commit "
           f"{args.commit}, run unmodified outside this repository by "
           "benchmarks/classification/reference/gen_knn_dino_golden.py, "
           f"CPU, torch {torch.__version__}) on seeded random features built from integers only, so the same bits "
           "on any CPU (benchmarks/classification/tests/test_knn.py::golden_features): for each case, "
           "rng = numpy.random.default_rng(seed); "
           "gauss(n) = (sum of 12 draws of rng.integers(0, 4096, (n, dim), dtype=int16) - 6 * 4096) / 4096; "
           "means = gauss(num_classes); train_labels = rng.integers(0, num_classes, n_train); test_labels = "
           "rng.integers(0, num_classes, n_test); train = means[train_labels] + noise * gauss(n_train); test = "
           "means[test_labels] + noise * gauss(n_test), exact in float64, then float32; both L2-normalised with "
           "nn.functional.normalize(dim=1, p=2) as DINO's pipeline does, then knn_classifier(train, train_labels, "
           "test, test_labels, k, T, num_classes) for k in 10, 20, 100, 200. top5_zero_vote_hits counts DINO top-5 "
           "hits whose class received no vote (they enter DINO's top-5 only through the order torch.sort leaves "
           "equal zero scores in; this harness never counts them, so its top-5 = (DINO hits - zero-vote hits) * "
           "100 / n_test); they are read off the scores knn_classifier sorts. features_sha256: of the generated "
           "tensors (exact, so a hash), to tell a changed random stream from a changed classifier.")
    data = {
        "provenance": common.provenance(args, __file__, {
            "cases": CASES, "ks": list(KS),
            "features": "benchmarks/classification/tests/test_knn.py::golden_features"},
                                        ["eval_knn.py"]),
        "how": how,
        "source": f"https://github.com/facebookresearch/dino/blob/{args.commit}/eval_knn.py",
        "cases": cases,
    }
    common.finish(args, data)


if __name__ == "__main__":
    main()
