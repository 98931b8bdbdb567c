"""Depth metrics per image, as dinov3/eval/depth/metrics.py computes them
(calculate_depth_metrics), and the evaluation's post-processing around them (eval.py
evaluate_depther_with_dataloader): ground truth outside the open range (min, max) ignored, the
evaluation mask, the prediction resized bilinearly to the ground truth and clamped to the range.
The data set's number is the mean over images of each image's value (eval.py: nanmean over the
per-image values at batch size 1), so the per-image values are what a bootstrap resamples.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

# ssl-bench name -> the official name (metrics.py DEPTH_METRICS)
OFFICIAL_NAMES = {"RMSE": "rmse", "AbsRel": "abs_rel", "log_RMSE": "rmse_log",
                  "delta1": "a1", "delta2": "a2", "delta3": "a3", "SqRel": "sq_rel",
                  "log10": "log_10", "SILog": "silog", "MAE": "mae"}
REPORTED = ("RMSE", "AbsRel", "log_RMSE", "delta1", "delta2", "delta3")


def image_metrics(gt: torch.Tensor, pred: torch.Tensor, valid: torch.Tensor) -> dict[str, float]:
    """Every metric of one image on its valid pixels with gt > 0 (NaN where none is valid)."""
    valid = valid & (gt > 0)
    gt, pred = gt[valid], pred[valid]  # in the inputs' dtype (float32), as metrics.py
    if gt.numel() == 0:
        return {name: float("nan") for name in OFFICIAL_NAMES}
    ratio = torch.maximum(gt / pred, pred / gt)
    err = gt - pred
    log_err = torch.log(gt) - torch.log(pred)
    silog = torch.sqrt(torch.mean(log_err ** 2) - torch.mean(log_err) ** 2) * 100
    out = {
        "delta1": (ratio < 1.25).float().mean(), "delta2": (ratio < 1.25 ** 2).float().mean(),
        "delta3": (ratio < 1.25 ** 3).float().mean(),
        "MAE": err.abs().mean(), "AbsRel": (err.abs() / gt).mean(), "SqRel": (err ** 2 / gt).mean(),
        "RMSE": torch.sqrt((err ** 2).mean()), "log_RMSE": torch.sqrt((log_err ** 2).mean()),
        # metrics.py: a NaN silog (a negative variance by rounding) reads 0
        "SILog": torch.nan_to_num(silog, nan=0.0),
        "log10": (torch.log10(gt) - torch.log10(pred)).abs().mean(),
    }
    return {k: float(v) for k, v in out.items()}


def eigen_box(h: int, w: int, box=(45, 471, 41, 601), ref=(480, 640)) -> tuple[int, int, int, int]:
    """(y1, y2, x1, x2) of the Eigen crop (datasets_utils.py make_valid_mask: rows 45:471, columns
    41:601 of a 480x640 NYU frame) scaled to an h x w map, with int() truncation as there."""
    y1, y2, x1, x2 = box
    return int(y1 / ref[0] * h), int(y2 / ref[0] * h), int(x1 / ref[1] * w), int(x2 / ref[1] * w)


# KITTI's crops as fractions of the (KB-cropped) ground truth, rows then columns: Garg et al.'s
# and Eigen et al.'s (Monocular-Depth-Estimation-Toolbox depth/datasets/kitti.py eval_mask,
# commit d8aff50, "following Adabins"; int() truncation as there)
KITTI_CROPS = {"kitti_garg": (0.40810811, 0.99189189, 0.03594771, 0.96405229),
               "kitti_eigen": (0.3324324, 0.91351351, 0.0359477, 0.96405229)}
EVAL_MASKS = ("nyu_eigen", "full", *KITTI_CROPS)


def kitti_box(h: int, w: int, crop: str = "kitti_garg") -> tuple[int, int, int, int]:
    """(y1, y2, x1, x2) of a KITTI evaluation crop on an h x w ground truth."""
    fy1, fy2, fx1, fx2 = KITTI_CROPS[crop]
    return int(fy1 * h), int(fy2 * h), int(fx1 * w), int(fx2 * w)


def valid_mask(gt: torch.Tensor, eval_mask: str = "nyu_eigen", ignored_value: float = 0.0) -> torch.Tensor:
    """(..., h, w) bool: inside the evaluation crop (one of EVAL_MASKS) and not ignored."""
    h, w = gt.shape[-2:]
    mask = torch.zeros_like(gt, dtype=torch.bool)
    if eval_mask == "nyu_eigen":
        y1, y2, x1, x2 = eigen_box(h, w)
        mask[..., y1:y2, x1:x2] = True
    elif eval_mask in KITTI_CROPS:
        y1, y2, x1, x2 = kitti_box(h, w, eval_mask)
        mask[..., y1:y2, x1:x2] = True
    elif eval_mask == "full":
        mask[...] = True
    else:
        raise ValueError(f"eval_mask must be one of {', '.join(EVAL_MASKS)}, found {eval_mask!r}")
    return mask & (gt != ignored_value)


def evaluate_prediction(pred: torch.Tensor, gt: torch.Tensor, *, min_depth: float, max_depth: float,
                        eval_mask: str = "nyu_eigen", ignored_value: float = 0.0) -> dict[str, float]:
    """One image's metrics from its (1, 1, h', w') prediction and (1, 1, H, W) ground truth in
    metres, in eval.py's order: range -> ignored, mask, bilinear resize, clamp, metrics."""
    gt = torch.where((gt >= max_depth) | (gt <= min_depth), torch.full_like(gt, ignored_value), gt)
    valid = valid_mask(gt, eval_mask, ignored_value)
    if pred.shape[-2:] != gt.shape[-2:]:
        pred = F.interpolate(pred, size=gt.shape[-2:], mode="bilinear", align_corners=False)
    pred = pred.clamp(min=min_depth, max=max_depth)
    return image_metrics(gt, pred, valid)
