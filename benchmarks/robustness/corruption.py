"""ImageNet-C: corruption errors and their mean (mCE).

Two definitions, both from the official code:

- ``normalizer: none`` (bytedance/ibot @ da316d8 analysis/corruptions_surf_variations/eval.py, a
  copy of hendrycks/robustness @ 8190fe3 ImageNet-C/test.py): each distortion's error is the mean
  over severities 1-5 of 1 - accuracy, and the printed "mCE (unnormalized by AlexNet errors)" is
  the mean of those over the 19 distortions the script lists (the 15 of the benchmark and the four
  extra ones: speckle_noise, gaussian_blur, spatter, saturate). This is the number iBOT's code
  prints for Table 8.
- ``normalizer: alexnet`` (Hendrycks & Dietterich 2019; google-research/augmix @ 9b9824c
  imagenet.py ``compute_mce``): CE_c = 100 x mean-over-severities error / AlexNet's
  mean-over-severities error of corruption c; mCE = the mean over the 15 corruptions. Neither
  code computes a relative mCE, so none is reported.

Each image's share: every (corruption, severity) folder holds the same images, so the mCE is a
mean over images of (1 / C) sum_c sum_s miss(c, s, i) / (S x norm_c) x 100, which is what the
record keeps for its interval.
"""
from __future__ import annotations

import numpy as np

from harness.errors import ConfigError

CORRUPTIONS_15 = (
    "gaussian_noise", "shot_noise", "impulse_noise", "defocus_blur", "glass_blur", "motion_blur", "zoom_blur",
    "snow", "frost", "fog", "brightness", "contrast", "elastic_transform", "pixelate", "jpeg_compression")
# hendrycks/robustness ImageNet-C/test.py's ``distortions`` (and iBOT's copy): the 15, then 4 extra
CORRUPTIONS_19 = CORRUPTIONS_15 + ("speckle_noise", "gaussian_blur", "spatter", "saturate")
SEVERITIES = (1, 2, 3, 4, 5)

# AlexNet's error averaged over the five severities, per corruption (in CORRUPTIONS_15's order):
# google-research/augmix @ 9b9824c7c19bf7e72df2d085d97b99b3bfb00ba4 imagenet.py ``ALEXNET_ERR``
# ("Raw AlexNet errors taken from https://github.com/hendrycks/robustness"; in that repository they
# are in the spreadsheet its README links under "Calculating the mCE", not in its code).
ALEXNET_ERR = dict(zip(CORRUPTIONS_15, (
    0.886428, 0.894468, 0.922640, 0.819880, 0.826268, 0.785948, 0.798360,
    0.866816, 0.826572, 0.819324, 0.564592, 0.853204, 0.646056, 0.717840, 0.606500)))

NORMALIZERS = ("none", "alexnet")


def normalizer_of(corruption: str, normalizer: str) -> float:
    if normalizer == "none":
        return 1.0
    if normalizer != "alexnet":
        raise ConfigError(f"ce_normalizer must be one of {NORMALIZERS}, found {normalizer!r}")
    if corruption not in ALEXNET_ERR:
        raise ConfigError(f"corruption {corruption!r} has no published AlexNet error; with ce_normalizer "
                          f"alexnet the corruptions are the 15 of {', '.join(CORRUPTIONS_15)}")
    return ALEXNET_ERR[corruption]


def corruption_errors(errors: dict[str, list[float]], normalizer: str) -> dict[str, float]:
    """CE per corruption in percent: 100 x mean over severities of the error (fractions) / the
    normalizer (1, or AlexNet's mean error)."""
    return {c: 100.0 * float(np.mean(e)) / normalizer_of(c, normalizer) for c, e in errors.items()}


def mean_corruption_error(errors: dict[str, list[float]], normalizer: str) -> float:
    ces = corruption_errors(errors, normalizer)
    return float(np.mean(list(ces.values())))


def per_image_shares(misses: dict[str, np.ndarray], normalizer: str) -> np.ndarray:
    """(N,) each image's share of the mCE: ``misses[c]`` is (S, N) bool, the image's misses at
    each severity; the mean of the result over images is the mCE."""
    parts = [m.astype(np.float64).mean(0) / normalizer_of(c, normalizer) for c, m in misses.items()]
    return 100.0 * np.mean(parts, axis=0)
