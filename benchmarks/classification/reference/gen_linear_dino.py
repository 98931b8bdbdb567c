"""Generate benchmarks/classification/fixtures/linear_dino_parity.json: DINO's own linear-probe training
(eval_linear.py: LinearClassifier, its SGD + CosineAnnealingLR, its `train` and
`validate_network`, DistributedSampler order) on the cached features of
benchmarks/classification/reference/linear_dino_common.py.

    python benchmarks/classification/reference/gen_linear_dino.py /tmp/official/dino

The first argument (or --official) is a checkout of https://github.com/facebookresearch/dino kept
outside this repository (7c446df5b9f45747937fb0d72314eb9f7b66930a expected; another commit needs
--allow-other-commit; the options of tests/reference/common.py apply: --out, --commit, --threads,
default 1; --features PATH runs it on stored features, e.g. the committed
benchmarks/classification/fixtures/linear_dino_parity_features.npz, instead of extracting them anew).
`eval_linear` is imported from it and its functions and classes are driven as `eval_linear()` drives
them after building its data:

    torch.manual_seed(init_seed); LinearClassifier(dim, num_labels) wrapped in DistributedDataParallel
    SGD(lr * batch_size_per_gpu * world_size / 256, momentum 0.9, weight_decay 0)
    CosineAnnealingLR(optimizer, epochs, eta_min=0)
    per epoch: train_loader.sampler.set_epoch(epoch); train(...); scheduler.step(); validate_network(...)

with these substitutions, none of which changes a number:
- the data sets are TensorDatasets of cached features (linear_dino_common.py) instead of
  ImageFolders of images, and `model` is a stand-in whose get_intermediate_layers(x, n) returns
  the given per-block tokens (DINO's own lines then assemble the probe input);
- one process: torch.distributed initialised with gloo, world size 1 (DistributedSampler and
  DistributedDataParallel as DINO builds them; DDP without device_ids, on the CPU);
- CPU: `Tensor.cuda` returns the tensor and `torch.cuda.synchronize` does nothing;
- DINO's meters sum their statistics over processes with a float64 all_reduce of a tensor
  made on 'cuda' (utils.SmoothedValue.synchronize_between_processes); over one process that
  sum is the value itself, so the step is skipped (`utils.is_dist_avail_and_initialized`,
  which only the meters and `get_world_size` (1 either way) call, returns False);
- `train` / `validate_network` read the script-level `args` for `args.arch` only: set to a
  namespace with arch "vit_small" (any ViT name: the ViT branch).
"""
from __future__ import annotations

import argparse
import base64
import contextlib
import io
import os
import socket
import time
from pathlib import Path

os.environ.setdefault("TQDM_DISABLE", "1")  # the reference's progress bars, one per run

import importlib.util  # noqa: E402

# tests/reference/common.py (the generators' command line and provenance) by its path: a generator runs as a
# script from its folder, and a site-packages ``tests`` package can shadow tests/ by name
_COMMON = importlib.util.spec_from_file_location(
    "common", Path(__file__).resolve().parents[3] / "tests" / "reference" / "common.py")
common = importlib.util.module_from_spec(_COMMON)
_COMMON.loader.exec_module(common)  # puts the repository root and tests/ on the import path
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"  # this folder's fixtures
import numpy as np  # noqa: E402
import torch  # noqa: E402
from torch import nn  # noqa: E402

from benchmarks.classification.reference.linear_dino_common import (  # noqa: E402
    CASES, FEATURES_FILE, IMAGES, MODEL, SAMPLER_SEED, build_image_folder, case_tokens, decode, load_tokens,
    sampler_epochs, save_tokens, sha256, sha256_file)

REPOSITORY = "https://github.com/facebookresearch/dino"
COMMIT = "7c446df5b9f45747937fb0d72314eb9f7b66930a"
FIXTURE = "linear_dino_parity.json"
EXPECTED = {"repo": "facebookresearch/dino", "commit": COMMIT, "file": "eval_linear.py"}
# top-level keys not compared with the committed fixture before writing (descriptions, timing;
# the pre-provenance fixture's "environment" and "generator", now in the provenance block)
NOT_COMPARED = ("provenance", "how", "reference", "generated_in_s", "environment", "generator", "features_file")




class CachedTokens(nn.Module):
    """Stands in for DINO's frozen ViT: an input row is already (n, T, d) per-block tokens."""

    def get_intermediate_layers(self, x, n=1):
        assert x.shape[1] == n, (x.shape, n)
        return [x[:, i] for i in range(n)]


def init_single_process_group() -> None:
    import torch.distributed as dist

    if dist.is_initialized():
        return
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)


def run_official(el, tokens: dict, case: dict, base_lr: float) -> dict:
    from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

    import utils  # DINO's utils, as eval_linear imports it

    n, avgpool, bs, epochs = case["n_last_blocks"], case["avgpool"], case["batch_size"], case["epochs"]
    x_tr, y_tr = torch.from_numpy(tokens["train"]), torch.from_numpy(tokens["train_y"])
    x_va, y_va = torch.from_numpy(tokens["val"]), torch.from_numpy(tokens["val_y"])
    num_labels = int(max(y_tr.max(), y_va.max())) + 1
    dim = x_tr.shape[-1] * (n + int(avgpool))  # eval_linear: embed_dim * (n_last_blocks + avgpool)
    model = CachedTokens()

    torch.manual_seed(case["init_seed"])
    linear_classifier = el.LinearClassifier(dim, num_labels=num_labels)
    w0, b0 = linear_classifier.linear.weight.detach().clone(), linear_classifier.linear.bias.detach().clone()
    linear_classifier = nn.parallel.DistributedDataParallel(linear_classifier)

    dataset_train = TensorDataset(x_tr, y_tr)
    sampler = DistributedSampler(dataset_train)
    train_loader = DataLoader(dataset_train, sampler=sampler, batch_size=bs, num_workers=0)
    val_loader = DataLoader(TensorDataset(x_va, y_va), batch_size=bs, num_workers=0)
    optimizer = torch.optim.SGD(linear_classifier.parameters(), base_lr * (bs * utils.get_world_size()) / 256.,
                                momentum=0.9, weight_decay=0)
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, epochs, eta_min=0)
    per_epoch = []
    best_acc = 0.0
    orders = []
    for epoch in range(epochs):
        train_loader.sampler.set_epoch(epoch)
        orders.append([int(i) for i in train_loader.sampler])
        with contextlib.redirect_stdout(io.StringIO()):
            train_stats = el.train(model, linear_classifier, optimizer, train_loader, epoch, n, avgpool)
            scheduler.step()
            test_stats = el.validate_network(val_loader, model, linear_classifier, n, avgpool)
        best_acc = max(best_acc, test_stats["acc1"])
        per_epoch.append({"lr": train_stats["lr"], "train_loss": train_stats["loss"],
                          "acc1": test_stats["acc1"], "acc5": test_stats.get("acc5"), "val_loss": test_stats["loss"]})
    lin = linear_classifier.module.linear
    return {"base_lr": base_lr, "lr": base_lr * bs / 256.0, "init_weight": w0.numpy(), "init_bias": b0.numpy(),
            "final_weight": lin.weight.detach().numpy().copy(), "final_bias": lin.bias.detach().numpy().copy(),
            "per_epoch": per_epoch, "best_acc": best_acc, "orders": orders, "num_labels": num_labels, "dim": dim}


def environment_extra() -> dict:
    """What the provenance block's environment (common.environment) does not say."""
    cpu = ""
    if Path("/proc/cpuinfo").is_file():
        cpu = next((ln.split(":", 1)[1].strip() for ln in Path("/proc/cpuinfo").read_text().splitlines()
                    if ln.startswith("model name")), "")
    harness_commit, harness_dirty = common.git_head(common.ROOT)
    return {"cpu": cpu, "torch_cpu_capability": torch.backends.cpu.get_cpu_capability(), "device": "cpu",
            "distributed": "gloo, world size 1", "harness_commit": harness_commit,
            "harness_worktree_dirty": harness_dirty}


def unpacked(tree):
    """``tree`` with every packed float32 array (as_list) decoded into numbers, for comparing."""
    if isinstance(tree, dict):
        if set(tree) == {"shape", "float32_le_base64"}:
            return decode(tree).astype(float).tolist()
        return {k: unpacked(v) for k, v in tree.items()}
    if isinstance(tree, list):
        return [unpacked(v) for v in tree]
    return tree


def as_list(a: np.ndarray) -> dict:
    """Exact float32 values, compactly (linear_dino_common.decode reads them)."""
    a = np.ascontiguousarray(a, dtype="<f4")
    return {"shape": list(a.shape), "float32_le_base64": base64.b64encode(a.tobytes()).decode()}


def run_cases(el, image_root: Path, stored: dict | None) -> tuple[dict, dict]:
    """Every case through DINO's code at each of its lrs: (the fixture's cases, the features per case)."""
    cases, all_tokens = {}, {}
    for name, case in CASES.items():
        tokens = stored[name] if stored is not None else case_tokens(case, image_root)
        all_tokens[name] = tokens
        runs = [run_official(el, tokens, case, lr) for lr in case["base_lrs"]]
        orders = runs[0]["orders"]
        assert all(r["orders"] == orders for r in runs)
        assert orders == sampler_epochs(len(tokens["train_y"]), case["epochs"])
        cases[name] = {
            "spec": case,
            "features_sha256": sha256(tokens["train"], tokens["train_y"], tokens["val"], tokens["val_y"]),
            "n_train": len(tokens["train_y"]), "n_val": len(tokens["val_y"]),
            "dim": runs[0]["dim"], "num_labels": runs[0]["num_labels"],
            "order_sha256": sha256(np.asarray(orders, np.int64)),
            "init_weight": as_list(runs[0]["init_weight"]),
            "runs": [{"base_lr": r["base_lr"], "lr": r["lr"], "per_epoch": r["per_epoch"], "best_acc": r["best_acc"],
                      "init_weight_equal_to_case": bool(np.array_equal(r["init_weight"], runs[0]["init_weight"])),
                      "init_bias_zero": bool(not r["init_bias"].any()),
                      "final_weight": as_list(r["final_weight"]), "final_bias": as_list(r["final_bias"])}
                     for r in runs],
        }
        print(f"{name}: " + "; ".join(f"lr {r['base_lr']}: acc1 per epoch "
                                       f"{[round(e['acc1'], 2) for e in r['per_epoch']]}" for r in runs))
    return cases, all_tokens


def fixture_provenance(args: argparse.Namespace) -> dict:
    prov = common.provenance(
        args, __file__,
        {"cases": CASES, "images": IMAGES, "model": MODEL, "sampler_seed": SAMPLER_SEED,
         "eval_linear_args": {"arch": "vit_small"}, "world_size": 1, "distributed_backend": "gloo"},
        common.loaded_official_files(args.official), extra_modules=("torchvision",),
        notes="official_files: every file of the checkout imported while the generator ran. The substitutions "
              "made to run it on a CPU in one process are in the fixture's how field (and the generator's "
              "docstring).")
    prov["environment"].update(environment_extra())
    return prov


def main(argv=None) -> None:
    def options(ap):
        ap.add_argument("--work", type=Path, default=Path("/tmp/linear_dino_work"),
                        help="where the images and the harness's feature cache are written")
        ap.add_argument("--allow-other-commit", action="store_true")
        ap.add_argument("--features", type=Path, default=None,
                        help=f"run on these stored features (a {FEATURES_FILE}) instead of extracting them; "
                             "the written fixture's features file is then a copy of them")

    args = common.parse_args(__doc__, FIXTURE, REPOSITORY, COMMIT, fixtures=FIXTURES, threads=1, positional=True,
                             extra=options, argv=argv)
    common.require_pinned_commit(args, COMMIT)
    os.environ.setdefault("SSL_BENCH_HOME", str(args.work / "home"))
    el = common.import_official(args.official, "eval_linear")  # refuses a copy from elsewhere
    dino_utils = common.import_official(args.official, "utils")

    el.args = argparse.Namespace(arch="vit_small")
    dino_utils.is_dist_avail_and_initialized = lambda: False
    torch.Tensor.cuda = lambda self, *a, **k: self
    torch.cuda.synchronize = lambda *a, **k: None
    init_single_process_group()

    image_root = build_image_folder(args.work / "images")
    stored = load_tokens(args.features) if args.features else None
    t0 = time.perf_counter()
    cases, all_tokens = run_cases(el, image_root, stored)
    seconds = time.perf_counter() - t0
    # The features DINO's code ran on, beside the fixture: the test feeds these (float
    # features recomputed on another CPU differ in their last bits).
    features_path = args.out.with_name(FEATURES_FILE)
    features_path.parent.mkdir(parents=True, exist_ok=True)
    save_tokens(features_path, all_tokens)
    print(f"wrote {features_path}")
    out = {
        "provenance": fixture_provenance(args),
        "reference": {**EXPECTED, "commit": args.commit, "url": REPOSITORY},
        "how": __doc__.split("\n\n", 2)[2].strip(),
        "images": IMAGES, "model": MODEL, "sampler_seed": SAMPLER_SEED,
        "features_file": {"name": FEATURES_FILE, "sha256": sha256_file(features_path),
                          "extracted": "stored features given with --features" if args.features else
                                       "by case_tokens (benchmarks/classification/reference/linear_dino_common.py) "
                                       "where this ran",
                          "arrays": "<case>/train, <case>/val: (N, n_last_blocks, 2, d) float32 (CLS, patch "
                                    "mean); <case>/train_y, <case>/val_y: int64 labels"},
        "cases": cases,
        "generated_in_s": round(seconds, 1),
    }
    print(f"ran the official code in {seconds:.0f} s")
    common.finish(args, out, skip=NOT_COMPARED, unpack=unpacked)


if __name__ == "__main__":
    main()
