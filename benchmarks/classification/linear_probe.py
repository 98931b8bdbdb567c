"""Linear probing on a frozen backbone: the DINO, iBOT and SynCLR (StableRep) recipes as
named presets, every learning rate of a recipe's grid trained at once on one backbone
forward per batch (harness/probes/linear_grid.py, the
protocol itself: harness/probes/linear_probe.py).

The backbone is frozen in the strict sense: eval mode (no dropout, no drop-path, no
BatchNorm statistics updates) and torch.no_grad for its forward; the tests check that its
weights are bit-identical after a probe epoch. Validation features are deterministic
(Resize -> CenterCrop), so they come from the harness.features.extract cache and are computed once
instead of once per epoch as in the official scripts; the numbers are the same.

Recipes (see benchmarks/classification/README.md for the sources and every difference):
- dino:   one lr 0.001 x B/256, SGD momentum 0.9, wd 0, cosine per epoch over 100 epochs,
          B = 1024, RandomResizedCrop(224) + flip, val Resize(256, bicubic) + CenterCrop(224),
          init N(0, 0.01), bias 0; best val top-1 over epochs. Features by arch: ViT-S/Ti:
          CLS of the last 4 blocks; ViT-B/L: last CLS interleaved with the patch mean.
- ibot:   the same, 45 lrs {1..9} x {1e-4 .. 1} (x B/256) at once, concatenated CLS+patch
          mean for ViT-B/L; best over epochs and lrs.
- synclr: last-block CLS, BatchNorm1d(affine=False, eps 1e-6) before the linear layer,
          10 lrs {0.001 .. 0.5} (x B/256), 90 epochs, cosine per iteration, drop_last,
          evaluated every 10 epochs, val Resize(256, bilinear) + CenterCrop(224).
- synth:  a CPU preset for SynthScenes' 64 px images (few epochs, small lr grid).
`cached_features: true` trains on cached val-transform features of the train split (no
augmentation): fast screening, its own fingerprint. `selection_holdout: F` (0 = off, every preset)
also trains the grid on the training split less a held-out fraction F and reports the number
chosen on that holdout and the last epoch's (harness/probes/grid_selection.py).
"""
from __future__ import annotations

from pathlib import Path

from harness.presets import load_presets
from harness.probes.linear_probe import LinearGridProbe
from harness.registry import register_protocol


@register_protocol("linear")
class LinearProbe(LinearGridProbe):
    CONFORMANCE_RUN = ("synth", {"dataset": "imagefolder", "cached_features": True, "epochs": 1, "progress": False},
                       "imagenet")
    PRESETS = load_presets("linear", Path(__file__).parent / "presets")
    DEFAULT_PRESET = "dino"


# iBOT eval_linear_multi.py's grid: [base * n for base in 10**k, k in -4..0, for n in 1..9].
IBOT_BASE_LRS = LinearProbe.PRESETS["ibot"]["base_lrs"]
