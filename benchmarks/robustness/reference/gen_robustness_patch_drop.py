"""Regenerate benchmarks/robustness/fixtures/robustness_patch_drop.json from iBOT's occlusion evaluation.

Runs bytedance/ibot analysis/occlusion/eval.py ``main(args, device)`` unmodified, its ``--dino``
branch (Naseer et al.'s patch drop as iBOT's copy of their evaluate.py runs it for Table 8), for
drop_best True and False (salient / non-salient) and drop_lambda 0.1 .. 1.0, on a small ImageFolder
of seeded noise images written under --work. Stand-ins, since no weights can be downloaded here:
``dino.dino_small`` (the saliency model) is a module whose ``forward_selfattention`` returns, for
head 1's [CLS] row, softmax(8 x the patch means of the first channel), recorded per image; the
classifier (``analysis.imagenet_models.vit_small``) records what it is given and predicts class 0.
``torch.nn.functional.interpolate`` is wrapped to record the patch mask it upsamples. The fixture
holds the attention rows (float inputs, fed to the test), the official masks (0/1 strings), the fraction of
exactly-zero values of each dropped image, and the returned accuracy and information loss.
Needs timm and einops (``pip install einops``).
"""
from __future__ import annotations

import argparse
from pathlib import Path

import importlib.util  # noqa: E402

# tests/reference/common.py (the generators' command line and provenance) by its path: a generator runs as a
# script from its folder, and a site-packages ``tests`` package can shadow tests/ by name
_COMMON = importlib.util.spec_from_file_location(
    "common", Path(__file__).resolve().parents[3] / "tests" / "reference" / "common.py")
common = importlib.util.module_from_spec(_COMMON)
_COMMON.loader.exec_module(common)  # puts the repository root and tests/ on the import path
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"  # this folder's fixtures

REPOSITORY = "https://github.com/bytedance/ibot"
COMMIT = "da316d82636a7a7356835ef224b13d5f3ace0489"
FIXTURE = "robustness_patch_drop.json"
SEED = 21
N_PER_CLASS = 3
LAMBDAS = [k / 10 for k in range(1, 11)]


def write_images(work: Path, seed: int) -> Path:
    import numpy as np
    from PIL import Image

    root = work / "val"
    rng = np.random.default_rng(seed)
    for c in ("n0", "n1"):
        (root / c).mkdir(parents=True, exist_ok=True)
        for i in range(N_PER_CLASS):
            small = rng.integers(0, 256, (8, 8, 3), dtype=np.uint8)  # blocky: patch means differ
            Image.fromarray(small).resize((256, 256), Image.NEAREST).save(root / c / f"{i}.png")
    return root


def stand_ins(record: dict):
    import torch

    class Saliency(torch.nn.Module):
        def forward_selfattention(self, x):
            b = x.shape[0]
            means = torch.nn.functional.avg_pool2d(x[:, :1], 16).reshape(b, -1)
            row = torch.softmax(8 * means, dim=1)
            record["attention"].append(row.clone())
            att = torch.zeros(b, 6, 197, 197)
            att[:, 1, 0, 1:] = row
            return att

    class Classifier(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.zeros(1))

        def forward(self, x):
            record["zero_fraction"].append((x == 0).float().mean((1, 2, 3)))
            out = torch.zeros(x.shape[0], 1000)
            out[:, 0] = 1
            return out

    return Saliency, Classifier


def run_args(test_data: Path, drop_best: bool, drop_lambda: float) -> argparse.Namespace:
    """The settings eval.py's main reads: its parser's defaults with --dino --model_name vit_small."""
    return argparse.Namespace(
        test_data=str(test_data), model_name="vit_small", scale_size=256, img_size=224, batch_size=4,
        drop_count=180, drop_best=drop_best, test_image=False, shuffle=False, shuffle_size=14, random_drop=False,
        random_offset_drop=False, cascade=False, saliency=False, saliency_box=False, drop_lambda=drop_lambda,
        standard_box=False, dino=True, lesion=False, block_index=0, pretrained_weights=None, patch_size=16,
        linear_eval=True, imagenet_default_color=True, bicubic_resize=False)


def main() -> None:
    args = common.parse_args(__doc__, FIXTURE, REPOSITORY, COMMIT, fixtures=FIXTURES, extra=lambda p: p.add_argument(
        "--work", type=Path, default=Path("/tmp/robustness_patch_drop_work"), help="where the images are written"))
    import torch

    record = {"attention": [], "zero_fraction": [], "mask": []}
    saliency, classifier = stand_ins(record)
    common.on_import_path(args.official)
    official = common.import_official(args.official / "analysis" / "occlusion", "eval", {
        "dino": {"dino_small": lambda patch_size=16, pretrained=True: saliency()},
        "analysis": {"__path__": []},
        "analysis.imagenet_models": {"vit_small": lambda **kw: classifier()}})
    interpolate = torch.nn.functional.interpolate

    def recording(x, *a, **kw):
        record["mask"].append(x[:, 0].bool().reshape(x.shape[0], -1).clone())
        return interpolate(x, *a, **kw)

    test_data = write_images(args.work, SEED)
    runs, attention = [], None
    torch.nn.functional.interpolate = recording
    try:
        for drop_best in (True, False):
            for lam in LAMBDAS:
                for key in record:
                    record[key].clear()
                acc, loss = official.main(run_args(test_data, drop_best, lam), torch.device("cpu"), verbose=False)
                rows = torch.cat(record["attention"]).tolist()
                if attention is not None and rows != attention:
                    raise SystemExit("the loader's order changed between runs: the attention rows differ")
                attention = rows
                runs.append({"drop_best": drop_best, "drop_lambda": lam, "accuracy": acc, "information_loss": loss,
                             "mask": ["".join(str(int(v)) for v in m) for m in torch.cat(record["mask"]).tolist()],
                             "zero_fraction": torch.cat(record["zero_fraction"]).tolist()})
    finally:
        torch.nn.functional.interpolate = interpolate
    files = [f for f in common.loaded_official_files(args.official) if f.endswith(".py")]
    out = {"provenance": common.provenance(args, __file__, {"seed": SEED, "n_per_class": N_PER_CLASS,
                                                            "lambdas": LAMBDAS, "batch_size": 4},
                                           files, extra_modules=("timm", "einops")),
           "how": "eval.py main() --dino per (drop_best, drop_lambda); rows in the loader's (shuffled, seeded) order, "
                  "the same in every run; a mask is a string of 0/1 per patch",
           "attention": attention, "runs": runs}
    common.finish(args, out)


if __name__ == "__main__":
    main()
