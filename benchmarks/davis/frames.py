"""How the official script prepares a frame and the first frame's labels (DINO / iBOT
``eval_video_segmentation.py``: ``read_frame`` l. 197-221, ``read_seg`` l. 224-241,
``color_normalize`` l. 244-248, ``to_one_hot`` l. 176-188; DINO line numbers).

- A frame keeps its shorter side at ``scale_size`` (480) and its longer side becomes
  ``floor(long * scale_size / short / 64) * 64`` (854x480 -> 832x480). The aspect test is
  ``h > w`` for frames and ``w > h`` for labels: on a square frame the two disagree (the label
  grid is the frame grid transposed), a quirk kept here (README.md).
- Frames are resized by OpenCV's bilinear ``cv2.resize`` on the 8-bit picture, then scaled to
  [0, 1] and normalised with std (0.228, 0.224, 0.225) (0.228, not ImageNet's 0.229).
- The first annotation is resized with PIL nearest straight to the patch grid and one-hot
  encoded with ``max label + 1`` channels.
"""
from __future__ import annotations

import numpy as np
import torch
from PIL import Image

OFFICIAL_MEAN = (0.485, 0.456, 0.406)
OFFICIAL_STD = (0.228, 0.224, 0.225)


def frame_size(h: int, w: int, scale_size: int = 480, multiple: int = 64) -> tuple[int, int]:
    """(height, width) ``read_frame`` resizes an h x w frame to."""
    if h > w:
        tw = scale_size
        th = int((scale_size * h / w) // multiple * multiple)
    else:
        th = scale_size
        tw = int((scale_size * w / h) // multiple * multiple)
    return th, tw


def label_size(h: int, w: int, scale_size: int = 480, multiple: int = 64) -> tuple[int, int]:
    """(height, width) ``read_seg`` scales an h x w annotation to (before dividing by the patch)."""
    if w > h:
        th = scale_size
        tw = int((scale_size * w / h) // multiple * multiple)
    else:
        tw = scale_size
        th = int((scale_size * h / w) // multiple * multiple)
    return th, tw


def _linear_taps(src: int, dst: int, clamp_weights: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """OpenCV's INTER_LINEAR source indices and 11-bit fixed-point weights along one axis
    (imgproc/resize.cpp ``resize``: centre-aligned source position computed in float32, weights
    ``saturate_cast<short>(w * 2048)``). Along x a position outside the picture takes the border
    pixel with weight 2048 (``clamp_weights``); along y only the row index is clamped, the
    weights stay as computed (their sum may then be 2047 or 2049)."""
    f = ((np.arange(dst, dtype=np.float64) + 0.5) * (src / dst) - 0.5).astype(np.float32)
    i0 = np.floor(f).astype(np.int64)
    frac = (f - i0.astype(np.float32)).astype(np.float32)
    if clamp_weights:
        low, high = i0 < 0, i0 >= src - 1
        frac[low], i0[low] = 0, 0
        frac[high], i0[high] = 0, src - 1
    w0 = np.rint((np.float32(1) - frac) * np.float32(2048)).astype(np.int64)
    w1 = np.rint(frac * np.float32(2048)).astype(np.int64)
    return np.clip(i0, 0, src - 1), np.clip(i0 + 1, 0, src - 1), np.stack([w0, w1])


def resize_linear(img: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """An 8-bit (H, W, C) picture resized to ``size`` = (height, width) bit for bit as
    ``cv2.resize(img, (width, height))`` (INTER_LINEAR) computes it, without OpenCV: the
    horizontal pass in 1/2048 units, then OpenCV's vectorised vertical pass (each row's sum
    shifted right by 4, multiplied by the 1/2048 weight keeping the high 16 bits, the two
    summed, + 2, shifted right by 2). Checked against opencv-python in
    tests/test_davis.py."""
    th, tw = size
    h, w = img.shape[:2]
    if (h, w) == (th, tw):
        return img
    x0, x1, wx = _linear_taps(w, tw, clamp_weights=True)
    y0, y1, wy = _linear_taps(h, th, clamp_weights=False)
    src = img.astype(np.int64)
    rows = src[:, x0] * wx[0][None, :, None] + src[:, x1] * wx[1][None, :, None]
    top = ((rows[y0] >> 4) * wy[0][:, None, None]) >> 16
    bottom = ((rows[y1] >> 4) * wy[1][:, None, None]) >> 16
    return np.clip((top + bottom + 2) >> 2, 0, 255).astype(np.uint8)


def frame_tensor(rgb: np.ndarray, size: tuple[int, int], mean=OFFICIAL_MEAN, std=OFFICIAL_STD) -> torch.Tensor:
    """(3, th, tw) float32 network input of an (H, W, 3) uint8 RGB frame, as ``read_frame``
    makes it (resize on 8 bits, /255 in float32, per-channel subtract then divide)."""
    small = resize_linear(rgb, size)
    x = torch.from_numpy(np.ascontiguousarray(np.transpose(small.astype(np.float32) / 255.0, (2, 0, 1))))
    for t, m, s in zip(x, mean, std):
        t.sub_(m)
        t.div_(s)
    return x


def first_frame_labels(mask: np.ndarray, size: tuple[int, int], patch: int) -> torch.Tensor:
    """(1, C, th // patch, tw // patch) one-hot labels of the first annotation (palette indices),
    ``size`` = :func:`label_size`; C = the largest index left after the nearest resize, plus one."""
    th, tw = size
    small = np.array(Image.fromarray(np.asarray(mask, dtype=np.uint8)).resize((tw // patch, th // patch),
                                                                              Image.NEAREST))
    labels = torch.from_numpy(small.astype(np.int64))
    n = int(labels.max()) + 1
    onehot = torch.zeros(labels.numel(), n).scatter_(1, labels.view(-1, 1), 1)
    return onehot.view(*labels.shape, n).permute(2, 0, 1).unsqueeze(0)
