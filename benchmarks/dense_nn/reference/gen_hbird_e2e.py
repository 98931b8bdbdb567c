"""Generate benchmarks/dense_nn/fixtures/hbird_e2e.json: open-hummingbird-eval's own end-to-end number
(images -> its data module and transforms -> features of this harness's backbone -> its
memory -> its search and aggregation -> its mIoU) on the data set and model of
benchmarks/dense_nn/reference/hbird_e2e_common.py.

    python benchmarks/dense_nn/reference/gen_hbird_e2e.py /tmp/official/open-hummingbird-eval --compare

The first argument (or --official) is a checkout of https://github.com/vpariza/open-hummingbird-eval,
kept outside this repository (v2.0.0 = 5e79da292730edded800a89828b84f38469f5476 is expected; another
commit needs --allow-other-commit). The options of tests/reference/common.py apply (--out,
--commit, --threads, default 1); before writing, the largest difference from the committed
fixture is printed. --compare also runs the harness side (recorded as harness_at_generation, as
in the committed fixture). Its code is imported from there and run unchanged except:

- `pytorch_lightning` is stubbed (its data modules subclass LightningDataModule and use
  nothing of it);
- its faiss wrapper (`hbird/nn/search_faiss.py`) requires GPUs (`GpuIndexFlatIP`); the class is
  replaced by one over faiss-cpu `IndexFlatIP`, the same exact inner-product search, returning
  (indices, distances) as it does;
- `PredsmIoU.compute` and `HbirdEvaluation._create_nn` are wrapped to record the confusion
  matrix and the memory size (what they compute is unchanged);
- for the runs without augmentation, `hbird_evaluation`'s train transform factory is replaced
  (it calls `get_hbird_train_transforms(input_size)` with no way to pass settings):
  `val_transform` gives the training images its validation transform (Resize((s, s)) of the PIL
  image, ToTensor, Normalize; masks resized by torch nearest): the comparison run.
  `train_transform_random_off` is its train transform with its own settings at their least
  random (every ColorJitter probability 0, RandomResizedCrop scale (1, 1)), for information:
  it is not deterministic. For a non-square image, get_params can still draw a box one pixel
  narrower or shorter than the image (the rounding of sqrt(area x aspect)) at a random offset,
  and it resizes the normalised float tensor, not the PIL image. Seeded with 0 (torch, random).
- for the replayed runs (`aug_replay`), the random draws of its augmentation are replaced by
  the harness's draws for the same (seed, image): `RandomApply`'s coin, `ColorJitter.get_params`'
  factor and `RandomResizedCrop.get_params`' box come from `HbirdAugment.params(seed, 0, stem)`;
  the transforms themselves (its Compose, torchvision's ColorJitter ops, ToTensor, Normalize,
  its paired resized_crop of image and mask) and everything after run as they are. The runs
  under `aug` draw from the global RNGs as the reference does.

The feature function given to the reference (`ftr_extr_fn`, FeatureExtractorSimple) returns the
harness backbone's final-normed last-block patch tokens, `get_features(x, 1, final_norm=True)`, the
features the harness's dense_nn protocol uses.
"""
from __future__ import annotations

import contextlib
import functools
import io
import json
import logging
import os
import platform
import random
import sys
import time
import types
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

from benchmarks.dense_nn.reference.hbird_e2e_common import (BATCH_SIZE, DATA, HARNESS_AUG_SEEDS, INPUT_SIZE, MODEL,  # noqa: E402
                                        MODEL_FILE, OFFICIAL_AUG_SEEDS, REPLAY_SEEDS, build_dataset,
                                        harness_values, make_model, run_harness, save_model)

REPOSITORY = "https://github.com/vpariza/open-hummingbird-eval"
COMMIT = "5e79da292730edded800a89828b84f38469f5476"
VERSION = "2.0.0"  # the release this commit is
FIXTURE = "hbird_e2e.json"
EXPECTED = {"repo": "vpariza/open-hummingbird-eval", "version": VERSION, "commit": COMMIT}
K = 30
# top-level keys not compared with the committed fixture before writing (descriptions, timing;
# the pre-provenance fixture's "environment" and "generator", now in the provenance block)
NOT_COMPARED = ("provenance", "how", "reference", "generated_in_s", "environment", "generator")




def load_official(checkout: Path) -> dict:
    """Import the reference from ``checkout`` with the substitutions listed in the docstring."""
    if "pytorch_lightning" not in sys.modules:
        pl = types.ModuleType("pytorch_lightning")

        class LightningDataModule:  # the data modules only call super().__init__()
            def __init__(self, *args, **kwargs):
                pass
        pl.LightningDataModule = LightningDataModule
        sys.modules["pytorch_lightning"] = pl
    import faiss

    he = common.import_official(checkout, "hbird.hbird_eval")  # refuses a copy from elsewhere
    import hbird.nn.search_faiss as sf
    from hbird.utils.eval_metrics import PredsmIoU

    for name in ("hbird.hbird_eval", "hbird.data"):  # they log every step at INFO
        logging.getLogger(name).setLevel(logging.WARNING)

    sf.NearestNeighborSearchFaiss = common.FaissCPUSearch
    record: dict = {}
    compute = PredsmIoU.compute

    def compute_recording(self, *args, **kwargs):
        record["confusion"] = self._conf_mat.clone().numpy()
        return compute(self, *args, **kwargs)
    PredsmIoU.compute = compute_recording
    create_nn = he.HbirdEvaluation._create_nn

    def create_nn_recording(self, *args, **kwargs):
        record["memory_rows"] = int(self.feature_memory.shape[0])
        return create_nn(self, *args, **kwargs)
    he.HbirdEvaluation._create_nn = create_nn_recording
    return {"he": he, "record": record, "train_factory": he.get_hbird_train_transforms, "faiss": faiss}


@contextlib.contextmanager
def replayed_draws(aug):
    """Feed the reference's train transform the harness's draws (HbirdAugment.params) for
    the training image being loaded; restores everything on exit."""
    import torchvision.transforms as trn
    from hbird.data.voc.voc_data import VOCDataset

    plan: dict = {}
    saved = (VOCDataset.__getitem__, trn.RandomApply.forward, trn.ColorJitter.__dict__["get_params"],
             trn.RandomResizedCrop.__dict__["get_params"])
    getitem = saved[0]

    def getitem_with_plan(self, index):
        if self.image_set != "trainaug":
            return getitem(self, index)
        from PIL import Image

        stem = Path(self.images[index]).stem
        with Image.open(self.images[index]) as im:
            width, height = im.size
        jit, box = aug.params(plan["seed"], 0, stem, height, width)
        plan.update(jit=list(jit), box=box, used_box=False)
        out = getitem(self, index)
        assert not plan["jit"] and plan["used_box"], f"{stem}: not every draw was consumed"
        return out

    def random_apply(self, img):  # torchvision RandomApply.forward with the harness's coin
        step = plan["jit"].pop(0)
        if step is None:
            return img
        plan["factor"] = step
        for t in self.transforms:
            img = t(img)
        return img

    def jitter_params(brightness, contrast, saturation, hue):
        name, factor = plan["factor"]
        ranges = {"brightness": brightness, "contrast": contrast, "saturation": saturation, "hue": hue}
        assert [k for k, v in ranges.items() if v is not None] == [name], (ranges, name)
        values = {k: (factor if k == name else None) for k in ranges}
        return (torch.tensor([0, 1, 2, 3]), values["brightness"], values["contrast"], values["saturation"],
                values["hue"])

    def crop_params(img, scale, ratio):
        assert tuple(scale) == tuple(aug.scale) and tuple(ratio) == tuple(aug.ratio), (scale, ratio)
        plan["used_box"] = True
        return plan["box"]

    VOCDataset.__getitem__ = getitem_with_plan
    trn.RandomApply.forward = random_apply
    trn.ColorJitter.get_params = staticmethod(jitter_params)
    trn.RandomResizedCrop.get_params = staticmethod(crop_params)
    try:
        yield plan
    finally:
        VOCDataset.__getitem__, trn.RandomApply.forward = saved[0], saved[1]
        trn.ColorJitter.get_params, trn.RandomResizedCrop.get_params = saved[2], saved[3]


def patch_tokens(model, imgs):
    """ftr_extr_fn for FeatureExtractorSimple: (B, N, D) patch tokens, no attention map."""
    p = model.get_features(imgs, n_last_blocks=1, final_norm=True).patches  # (B, 1, h, w, D)
    b, _, h, w, d = p.shape
    return p[:, 0].reshape(b, h * w, d).float(), None


def run_official(off: dict, model, hbird_root: Path, train_transforms: str) -> dict:
    he = off["he"]
    orig = off["train_factory"]
    if train_transforms == "val_transform":
        he.get_hbird_train_transforms = lambda input_size: he.get_hbird_val_transforms(input_size)
    elif train_transforms == "train_transform_random_off":
        he.get_hbird_train_transforms = functools.partial(
            orig, min_scale_factor=1.0, max_scale_factor=1.0, brightness_jitter_probability=0.0,
            contrast_jitter_probability=0.0, saturation_jitter_probability=0.0, hue_jitter_probability=0.0)
    else:
        he.get_hbird_train_transforms = orig
    off["record"].clear()
    try:
        with contextlib.redirect_stdout(io.StringIO()):  # its data modules print their sizes
            miou = he.hbird_evaluation(model.backbone, d_model=model.backbone.embed_dim,
                                       patch_size=model.backbone.patch_size, dataset_name="voc",
                                       data_dir=str(hbird_root), batch_size=BATCH_SIZE, input_size=INPUT_SIZE,
                                       augmentation_epoch=1, device="cpu", n_neighbours=K, nn_method="faiss",
                                       ftr_extr_fn=patch_tokens, memory_size=None, num_workers=0)
    finally:
        he.get_hbird_train_transforms = orig
    return {"miou": float(miou), "confusion": off["record"]["confusion"],
            "memory_rows": off["record"]["memory_rows"]}


def environment_extra() -> dict:
    """What the provenance block's environment (common.environment) does not say."""
    cpu = next((ln.split(":", 1)[1].strip() for ln in Path("/proc/cpuinfo").read_text().splitlines()
                if ln.startswith("model name")), platform.processor()) if Path("/proc/cpuinfo").is_file() else ""
    harness_commit, harness_dirty = common.git_head(common.ROOT)
    return {"cpu": cpu, "faiss_threads": 1, "device": "cpu", "harness_commit": harness_commit,
            "harness_worktree_dirty": harness_dirty}


HOW = ("open-hummingbird-eval's hbird.hbird_eval.hbird_evaluation (v2.0.0, commit in provenance) run by "
       "benchmarks/dense_nn/reference/gen_hbird_e2e.py on the data set of "
       "benchmarks/dense_nn/reference/hbird_e2e_common.py "
       "build_dataset() (24 training, 12 validation SynthScenes crops, VOC layout; sha256 in data) with the "
       "random-init vit_cpu_tiny (seed 0) whose final-normed last-block patch tokens are the feature function; "
       "the settings are in settings, the substitutions (CPU faiss, stubbed pytorch_lightning, recording "
       "wrappers, the train transform of the runs without augmentation, the replayed draws) in "
       "substitutions. noaug: training images through the validation transform (val_transform, the "
       "comparison run) and through the train transform at its least random (train_transform_random_off, "
       "information only), random.seed(0) and torch.manual_seed(0) first; aug_replay: the train transform "
       "with the harness's draws for seeds " + ", ".join(map(str, REPLAY_SEEDS)) + "; aug: the train "
       "transform on the global RNGs seeded (random, numpy, torch) with each seed. Each run records the "
       "mIoU it returns, the 21 x 21 confusion matrix and the memory size. torch and faiss single-threaded.")


def run_reference(off, model, root: Path, n_aug_seeds: int) -> tuple[dict, dict, list]:
    """The reference without augmentation (two transforms), with the harness's draws replayed, and on its own
    seeded global RNGs: (noaug, replay by seed, mIoU per augmentation seed)."""
    noaug = {}
    for name in ("val_transform", "train_transform_random_off"):
        random.seed(0)
        torch.manual_seed(0)
        noaug[name] = run_official(off, model, root, name)
    from benchmarks.dense_nn.protocol import DenseNN

    replay = {}
    for seed in REPLAY_SEEDS:
        with replayed_draws(DenseNN.from_preset("hbird", harness_values("hbird", seed)).aug()) as plan:
            plan["seed"] = seed
            r = run_official(off, model, root, "train_transform")
        replay[seed] = r
    aug = []
    for seed in OFFICIAL_AUG_SEEDS[:n_aug_seeds]:
        # the reference draws from the global RNGs (python random: RandomResizedCrop's p;
        # torch: RandomApply, ColorJitter factors, get_params), in data-loader order
        random.seed(seed)
        np.random.seed(seed)
        torch.manual_seed(seed)
        aug.append(run_official(off, model, root, "train_transform")["miou"])
    return noaug, replay, aug


def reference_settings(model) -> dict:
    return {"entry": "hbird.hbird_eval.hbird_evaluation", "dataset_name": "voc", "input_size": INPUT_SIZE,
            "patch_size": model.backbone.patch_size, "d_model": model.backbone.embed_dim,
            "batch_size": BATCH_SIZE, "augmentation_epoch": 1, "n_neighbours": K, "nn_method": "faiss",
            "memory_size": None, "num_workers": 0, "device": "cpu",
            "ignore_index": "255 (get_dataset's for voc)", "num_classes": 21,
            "metric": "the return value of evaluate(): PredsmIoU.compute default (Hungarian, mean over 21)"}

def fixture_provenance(args, settings: dict) -> dict:
    files = common.loaded_official_files(args.official)
    prov = common.provenance(
        args, __file__,
        {"settings": settings, "data": DATA, "model": MODEL, "replay_seeds": REPLAY_SEEDS,
         "official_aug_seeds": OFFICIAL_AUG_SEEDS[:args.n_aug_seeds],
         "harness_aug_seeds": HARNESS_AUG_SEEDS[:args.n_aug_seeds] if args.compare else None,
         "noaug_seeding": "random.seed(0), torch.manual_seed(0) before each run", "faiss_threads": 1,
         "version": VERSION},
        files, extra_modules=("torchvision", "scipy", "faiss", "PIL"),
        notes="official_files: every file of the checkout imported while the generator ran. The substitutions "
              "made to run it on a CPU are in the fixture's substitutions field (and the generator's docstring).")
    prov["environment"].update(environment_extra())
    return prov


def compare_with_harness(args, data: dict, model, noaug: dict, replay: dict, aug: list) -> dict:
    """The harness on the same data and model, without augmentation, with the replayed draws and on its own seeds."""
    h = run_harness(data["harness_root"], model, "none", 0, args.work / "artifacts")
    ref = noaug["val_transform"]
    cmp = {"noaug": {"miou": h["miou"], "bank_size": h["bank_size"],
                     "confusion_equal": bool(np.array_equal(h["confusion"], ref["confusion"]))}}
    for seed, r in replay.items():
        hr = run_harness(data["harness_root"], model, "hbird", seed, args.work / "artifacts")
        cmp[f"aug_seed_{seed}"] = {"miou": hr["miou"],
                                   "confusion_equal": bool(np.array_equal(hr["confusion"], r["confusion"]))}
    ha = [run_harness(data["harness_root"], model, "hbird", s, args.work / "artifacts")["miou"]
          for s in HARNESS_AUG_SEEDS[:args.n_aug_seeds]]
    cmp["aug"] = {"seeds": HARNESS_AUG_SEEDS[:args.n_aug_seeds], "miou": ha, "mean": float(np.mean(ha)),
                  "std": float(np.std(ha, ddof=1))}
    print(json.dumps({k: v for k, v in cmp.items() if k != "aug"}, indent=1))
    print(f"harness aug {cmp['aug']['mean']:.6f} +- {cmp['aug']['std']:.6f} ({len(ha)} seeds) vs reference "
          f"{float(np.mean(aug)):.6f} +- {float(np.std(aug, ddof=1)):.6f} ({len(aug)} seeds)")
    return cmp


def main(argv=None) -> None:
    def options(ap):
        ap.add_argument("--work", type=Path, default=Path("/tmp/hbird_e2e_work"),
                        help="where the data set and the harness's caches are written")
        ap.add_argument("--allow-other-commit", action="store_true")
        ap.add_argument("--n-aug-seeds", type=int, default=len(OFFICIAL_AUG_SEEDS),
                        help="for quick tries: fewer seeds for the statistics (the fixture uses all)")
        ap.add_argument("--compare", action="store_true", help="also run the harness side and print both")
        ap.add_argument("--weights", type=Path, default=None,
                        help=f"run with these stored weights (a {MODEL_FILE}, e.g. the committed one) instead "
                             "of this machine's random init")

    args = common.parse_args(__doc__, FIXTURE, REPOSITORY, COMMIT, fixtures=FIXTURES, threads=1, positional=True,
                             extra=options, argv=argv)
    common.require_pinned_commit(args, COMMIT, f" (v{VERSION})")
    os.environ.setdefault("SSL_BENCH_HOME", str(args.work / "home"))
    off = load_official(args.official)
    off["faiss"].omp_set_num_threads(1)
    data = build_dataset(args.work / "data")
    model = make_model(args.weights)

    t0 = time.perf_counter()
    noaug, replay, aug = run_reference(off, model, data["hbird_root"], args.n_aug_seeds)
    seconds = time.perf_counter() - t0

    settings = reference_settings(model)
    out = {
        "provenance": fixture_provenance(args, settings),
        "reference": {**EXPECTED, "commit": args.commit, "url": REPOSITORY},
        "how": HOW,
        "data": {**DATA, "sha256": data["sha256"],
                 "how": "benchmarks/dense_nn/reference/hbird_e2e_common.py build_dataset(); sha256 over every file's "
                        "root-relative name and bytes in the harness layout (the reference's layout links to "
                        "the same files)"},
        "model": {**MODEL, "weights_sha256": model.cache_key, "weights_file": MODEL_FILE,
                  "features": "get_features(x, n_last_blocks=1, norm=True) patch tokens (final LayerNorm)"},
        "settings": settings,
        "substitutions": __doc__.split("unchanged except:")[1].split("The feature function")[0].strip(),
        "noaug": {name: {"miou": r["miou"], "memory_rows": r["memory_rows"],
                         "confusion": r["confusion"].astype(int).tolist()} for name, r in noaug.items()},
        "aug_replay": {str(seed): {"miou": r["miou"], "memory_rows": r["memory_rows"],
                                   "confusion": r["confusion"].astype(int).tolist()} for seed, r in replay.items()},
        "aug": {"seeds": OFFICIAL_AUG_SEEDS[:args.n_aug_seeds],
                "seeding": "random.seed, np.random.seed, torch.manual_seed (seed) before each run",
                "miou": aug, "mean": float(np.mean(aug)), "std": float(np.std(aug, ddof=1))},
        "generated_in_s": round(seconds, 1),
    }
    print(f"reference: noaug {[round(r['miou'], 6) for r in noaug.values()]}, "
          f"aug {out['aug']['mean']:.6f} +- {out['aug']['std']:.6f} over {len(aug)} seeds ({seconds:.0f} s)")

    if args.compare:  # the harness on the same data and model, recorded for information
        out["harness_at_generation"] = compare_with_harness(args, data, model, noaug, replay, aug)
    common.finish(args, out, skip=NOT_COMPARED)
    # the weights the reference ran on, beside the fixture: the test loads them (another CPU's
    # random init differs in its last bits)
    save_model(model, args.out.with_name(MODEL_FILE))
    print(f"wrote {args.out.with_name(MODEL_FILE)}")

if __name__ == "__main__":
    main()
