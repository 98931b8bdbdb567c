"""Regenerate benchmarks/robustness/fixtures/robustness_mce_ibot.json from iBOT's ImageNet-C evaluation.

Runs bytedance/ibot analysis/corruptions_surf_variations/eval.py unmodified (a script: importing it runs it) (its copy
of hendrycks/robustness ImageNet-C/test.py that printed iBOT Table 8's mCE) on a small ImageNet-C
layout written under --work: the 19 distortions it lists x severities 1-5 x 2 classes x 3 seeded
noise images. Stand-ins: ``analysis.imagenet_models.vit_small`` is a module predicting class 0 or 1
from the image's first pixel (recorded with the targets), ``Tensor.cuda`` is the identity (CPU),
``--ngpu 0``. The fixture holds each (distortion, severity)'s per-image misses, the error tuple
the script prints ("=Average"), and its printed per-distortion CE and mCE (two decimals).
"""
from __future__ import annotations

import contextlib
import io
import re
import sys
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
FIXTURE = "robustness_mce_ibot.json"
SEED = 19
SCRIPT = "analysis/corruptions_surf_variations/eval.py"
DISTORTIONS = ['gaussian_noise', 'shot_noise', 'impulse_noise', 'defocus_blur', 'glass_blur', 'motion_blur',
               'zoom_blur', 'snow', 'frost', 'fog', 'brightness', 'contrast', 'elastic_transform', 'pixelate',
               'jpeg_compression', 'speckle_noise', 'gaussian_blur', 'spatter', 'saturate']


def write_layout(work: Path, seed: int) -> Path:
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(seed)
    for d in DISTORTIONS:
        for s in range(1, 6):
            for c in ("n0", "n1"):
                folder = work / d / str(s) / c
                folder.mkdir(parents=True, exist_ok=True)
                for i in range(3):
                    Image.fromarray(rng.integers(0, 256, (224, 224, 3), dtype=np.uint8)).save(folder / f"{i}.png")
    return work


def main() -> None:
    args = common.parse_args(__doc__, FIXTURE, REPOSITORY, COMMIT, fixtures=FIXTURES, extra=lambda p: p.add_argument(
        "--work", type=Path, default=Path("/tmp/robustness_mce_ibot_work"), help="where the images are written"))
    import torch

    calls = []

    class StandIn(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.zeros(1))

        def forward(self, x):
            pred = (x[:, 0, 0, 0] > 0.066).long()  # per image: 0 or 1, from one pixel
            calls.append(pred.clone())
            return torch.nn.functional.one_hot(pred, 2).float()

    data = write_layout(args.work, SEED)
    stubs = {"analysis": {"__path__": []}, "analysis.imagenet_models": {"vit_small": lambda **kw: StandIn()}}
    cuda, torch.Tensor.cuda = torch.Tensor.cuda, lambda self, *a, **k: self
    argv, sys.argv = sys.argv, [SCRIPT, "--arch", "vit_small", "--data", str(data), "--ngpu", "0"]
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out):
            common.import_official(args.official / Path(SCRIPT).parent, "eval", stubs)  # a script: runs on import
    finally:
        torch.Tensor.cuda, sys.argv = cuda, argv
    text = out.getvalue()
    errs = [[float(v) for v in re.findall(r"[\d.]+(?:e-?\d+)?", m)] for m in re.findall(r"=Average \((.*?)\)", text)]
    ce = dict(re.findall(r"Distortion: (\w+)\s*\| CE \(unnormalized\) \(%\): ([\d.]+)", text))
    mce = float(re.search(r"mCE \(unnormalized by AlexNet errors\) \(%\): ([\d.]+)", text).group(1))
    preds = torch.cat(calls).reshape(len(DISTORTIONS), 5, -1)  # one batch per folder, in order
    targets = torch.tensor([0, 0, 0, 1, 1, 1])
    misses = {d: ["".join(str(int(v)) for v in (preds[k, s] != targets)) for s in range(5)]
              for k, d in enumerate(DISTORTIONS)}
    result = {"provenance": common.provenance(args, __file__, {"seed": SEED, "images_per_folder": 6,
                                                               "argv": ["--arch", "vit_small", "--ngpu", "0"]},
                                              [SCRIPT], extra_modules=("torchvision",)),
              "how": "eval.py run as a script; misses[d][s] a 0/1 string per image (ImageFolder order)",
              "distortions": DISTORTIONS, "misses": misses, "printed_errors": errs,
              "printed_ce": {k: float(v) for k, v in ce.items()}, "printed_mce": mce}
    common.finish(args, result)


if __name__ == "__main__":
    main()
