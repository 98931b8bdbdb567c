"""Probe3D's NAVI correspondence steps (evaluate_navi_correspondence.py, evals/utils/correspondence.py,
evals/utils/transformations.py) in this project's own code: how a prepared frame becomes the model's
input, how two feature maps give correspondences (ratio test on nearest neighbours of upsampled
patch features at the points with depth), and how a correspondence's 3D and 2D errors follow from the
pair's relative pose."""
from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np
import torch
import torch.nn.functional as F
import torchvision.transforms.functional as TF

from benchmarks.correspondence.matching import center_padding
from harness.config import fingerprint
from harness.data.transforms import IMAGENET_MEAN, IMAGENET_STD
from harness.errors import DataError

THRESHOLDS_M = {"recall_1cm": 0.01, "recall_2cm": 0.02, "recall_5cm": 0.05}   # metric_thresh
THRESHOLDS_PX = {"recall_5px": 5.0, "recall_25px": 25.0, "recall_50px": 50.0}  # px_thresh
BIN_THRESHOLD = 0.02                                                           # rec_2cm
ANGLE_BINS = {"recall_2cm_0_30": (0, 30), "recall_2cm_30_60": (30, 60), "recall_2cm_60_90": (60, 90),
              "recall_2cm_90_120": (90, 120)}                                  # [0, 30, 60, 90, 120]


@dataclass(frozen=True)
class FrameNormalize:
    """navi.py's image path after the frame is prepared (harness/data/navi_pairs.py): ToTensor, normalise (its
    nearest resizes pick pixels, so normalising after them is the same); then the model wrapper's
    ``center_padding`` to a multiple of the patch size."""

    patch_size: int
    mean: tuple = IMAGENET_MEAN
    std: tuple = IMAGENET_STD
    fixed_size = True

    def __call__(self, img) -> torch.Tensor:
        return center_padding(TF.normalize(TF.to_tensor(img), list(self.mean), list(self.std)), self.patch_size)

    def fingerprint(self) -> str:
        return fingerprint({"kind": "probe3d_navi_frame", **asdict(self)})


def nearest_two(query: torch.Tensor, target: torch.Tensor, chunk: int = 4096) -> tuple[torch.Tensor, torch.Tensor]:
    """(cosine distances (n, 2), indices (n, 2)) of each query row's two nearest target rows by
    cosine (knn_points with metric "cosine": exact search on L2-normalised rows, Probe3D's faiss
    GpuIndexFlatL2; the distances recomputed as 1 - cosine similarity)."""
    q, t = F.normalize(query, dim=-1), F.normalize(target, dim=-1)
    idx = torch.cat([(q[i:i + chunk] @ t.T).topk(2, dim=1).indices for i in range(0, len(q), chunk)])
    return 1 - F.cosine_similarity(t[idx], q[:, None, :], dim=-1), idx


def ratio_test_matches(feat_0: torch.Tensor, feat_1: torch.Tensor, xyz_0: torch.Tensor, xyz_1: torch.Tensor,
                       num_corr: int) -> tuple[torch.Tensor, ...]:
    """(view 0's points, view 1's points, view 0's pixels, view 1's pixels) of the ``num_corr``
    most distinctive correspondences from view 0 to view 1, best first: points (k, 3), pixels (k, 2)
    the (u, v) centres on the point grid (estimate_correspondence_xyz with ratio_test True): the
    (d, h, w) feature maps upsampled bicubically to the (3, H, W) point grids, the positions with
    depth kept, each one's two nearest neighbours in the other view, weight 1 - d1 / d2, the top
    ``num_corr`` weights."""
    _, h, w = xyz_0.shape
    f0 = F.interpolate(feat_0[None].float(), size=(h, w), mode="bicubic")[0].permute(1, 2, 0)
    f1 = F.interpolate(feat_1[None].float(), size=(h, w), mode="bicubic")[0].permute(1, 2, 0)
    keep_0, keep_1 = xyz_0[2] > 0, xyz_1[2] > 0
    if int(keep_1.sum()) < 2 or not keep_0.any():
        raise DataError(f"a NAVI pair has {int(keep_0.sum())} and {int(keep_1.sum())} points with depth on its "
                        f"{h}x{w} grid; at least 1 and 2 are needed to match")
    dists, idx = nearest_two(f0[keep_0], f1[keep_1])
    dists = dists.clamp(min=1e-9)
    weight = 1 - dists[:, 0] / dists[:, 1].clamp(min=1e-9)
    _, source = torch.topk(weight, k=min(num_corr, len(weight)), dim=-1)
    target = idx[:, 0][source]
    uv = pixel_centres(h, w)
    return (xyz_0.permute(1, 2, 0)[keep_0][source], xyz_1.permute(1, 2, 0)[keep_1][target],
            uv[keep_0][source], uv[keep_1][target])


def pixel_centres(h: int, w: int) -> torch.Tensor:
    """(h, w, 2): each grid cell's (u, v) centre."""
    v, u = torch.meshgrid(torch.arange(h) + 0.5, torch.arange(w) + 0.5, indexing="ij")
    return torch.stack([u, v], dim=-1)


def relative_pose(pose_0: torch.Tensor, pose_1: torch.Tensor) -> torch.Tensor:
    """(3, 4) camera-0-to-camera-1 transform of two world-to-camera poses (Rt_1 @ Rt_0^-1)."""
    return (pose_1 @ pose_0.inverse()).float()[:3, :4]


def project(xyz: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    uvd = xyz @ k.transpose(-1, -2)
    return uvd[:, :2] / uvd[:, 2:3].clamp(min=1e-9)


def correspondence_errors(xyz_0: torch.Tensor, xyz_1: torch.Tensor, rt_01: torch.Tensor,
                          focal_1: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(3D errors in metres, 2D errors in pixels of view 1) of corresponding points: view 0's point
    moved into view 1 against view 1's, and both projected with view 1's ``diag(f, f, 1)``."""
    in_1 = xyz_0 @ rt_01[:, :3].transpose(-2, -1) + rt_01[None, :, 3]
    k = torch.eye(3)
    k[:2] = focal_1 * k[:2]
    return (in_1 - xyz_1).norm(p=2, dim=1), (project(in_1, k) - project(xyz_1, k)).norm(p=2, dim=1)


def rotation_angle_deg(rt_01: torch.Tensor) -> float:
    """so3_rotation_angle of the relative rotation, in degrees."""
    trace = rt_01[0, 0] + rt_01[1, 1] + rt_01[2, 2]
    return float(torch.acos(((trace - 1.0) * 0.5).clamp(min=-1, max=1)) * 180.0 / np.pi)


def pair_counts(err_3d: torch.Tensor, err_2d: torch.Tensor) -> dict[str, int]:
    """Correspondences within each threshold (float32 comparisons, as there)."""
    out = {m: int((err_3d < th).sum()) for m, th in THRESHOLDS_M.items()}
    out.update({m: int((err_2d < th).sum()) for m, th in THRESHOLDS_PX.items()})
    return out


def angle_bin(angle: float) -> str | None:
    """The metric of the bin holding ``angle`` (lower edge in, upper out); None beyond the last."""
    return next((m for m, (lo, hi) in ANGLE_BINS.items() if lo <= angle < hi), None)


def scaled_points(xyz: torch.Tensor, scale_factor: float) -> torch.Tensor:
    """The (3, S, S) point grid at ``scale_factor`` (nearest, "to avoid a huge matching problem")."""
    return F.interpolate(xyz[None], scale_factor=scale_factor, mode="nearest")[0]
