"""Label propagation as DINO's ``eval_video_segmentation.py`` computes it (identical in iBOT's
``evaluation/eval_video_segmentation.py``), on patch features given as tensors.

Per target frame (``label_propagation``, l. 113-150): cosine affinities to every patch of the
context frames -- the first frame and the ``n_last_frames`` (7) frames before the target
(``eval_video_tracking_davis``, l. 45-71) -- as ``exp(cos / 0.1)``, kept only inside a
(2 * 12 + 1)^2 window around the query's position (``restrict_neighborhood``, l. 85-99), then
for each query only the sources at or above its ``topk`` (5)-th largest value over all context
frames (ties kept), normalised to sum 1; the target's soft labels are the weighted sum of the
context frames' soft labels (the queue keeps soft labels, never their argmax). The output
(l. 73-82): bilinear upsampling by the patch size, each channel min-max normalised (``norm_mask``,
l. 102-110), argmax, nearest resize back to the frame's original size. The operations and their
order are the official ones, so the same features give the same floats.
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Callable, Iterator

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image


@dataclass(frozen=True)
class PropagationSettings:
    n_last_frames: int = 7
    size_mask_neighborhood: int = 12
    topk: int = 5
    temperature: float = 0.1


def neighborhood_mask(h: int, w: int, size: int) -> torch.Tensor:
    """(h*w, h*w) 0/1: query (i, j) may take labels from source (i', j') iff |i - i'| <= size
    and |j - j'| <= size (``restrict_neighborhood``, vectorised)."""
    ii, jj = torch.meshgrid(torch.arange(h), torch.arange(w), indexing="ij")
    ii, jj = ii.reshape(-1), jj.reshape(-1)
    near = ((ii[:, None] - ii[None, :]).abs() <= size) & ((jj[:, None] - jj[None, :]).abs() <= size)
    return near.float()


def propagate_step(feat_tar: torch.Tensor, h: int, w: int, context_feats: list[torch.Tensor],
                   context_segs: list[torch.Tensor], s: PropagationSettings,
                   mask: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor | None]:
    """One target frame: ``feat_tar`` (h*w, d) raw patch features, ``context_feats`` each
    (d, h*w), ``context_segs`` each (1, C, h', w') soft labels (h'*w' = h*w). Returns the
    target's (1, C, h', w') soft labels and the neighbourhood mask (built once per video)."""
    ncontext = len(context_feats)
    sources = F.normalize(torch.stack(context_feats), dim=1, p=2)   # ncontext x d x hw
    target = F.normalize(feat_tar, dim=1, p=2)                      # hw x d
    target = target.unsqueeze(0).repeat(ncontext, 1, 1)
    aff = torch.exp(torch.bmm(target, sources) / s.temperature)    # ncontext x query x key
    if s.size_mask_neighborhood > 0:
        if mask is None:
            mask = neighborhood_mask(h, w, s.size_mask_neighborhood).unsqueeze(0).to(aff.device)
        aff *= mask
    aff = aff.transpose(2, 1).reshape(-1, h * w)                     # ncontext*key x query
    tk_val, _ = torch.topk(aff, dim=0, k=s.topk)
    tk_val_min, _ = torch.min(tk_val, dim=0)
    aff[aff < tk_val_min] = 0
    aff = aff / torch.sum(aff, keepdim=True, axis=0)
    segs = torch.cat(context_segs)
    n, c, hs, ws = segs.shape
    segs = segs.reshape(n, c, -1).transpose(2, 1).reshape(-1, c).T  # C x ncontext*hw
    return torch.mm(segs, aff).reshape(1, c, hs, ws), mask


def propagate_video(features: Callable[[int], torch.Tensor] | list[torch.Tensor], n_frames: int, h: int, w: int,
                    first_seg: torch.Tensor, s: PropagationSettings) -> Iterator[tuple[int, torch.Tensor]]:
    """Yields (frame index, (1, C, h', w') soft labels) for frames 1..n_frames-1. ``features(t)``
    (or a list): frame t's (h*w, d) patch features; ``first_seg``: frame 0's one-hot labels."""
    get = features if callable(features) else features.__getitem__
    first = get(0).T
    queue: deque[tuple[torch.Tensor, torch.Tensor]] = deque()
    mask = None
    for t in range(1, n_frames):
        feat = get(t)
        seg, mask = propagate_step(feat, h, w, [first] + [f for f, _ in queue], [first_seg] + [g for _, g in queue],
                                   s, mask)
        if len(queue) == s.n_last_frames:
            queue.popleft()
        queue.append((feat.T, seg.clone()))
        yield t, seg


def norm_mask(mask: torch.Tensor) -> torch.Tensor:
    """Each channel with a positive maximum min-max scaled to [0, 1], in place (``norm_mask``)."""
    for c in range(mask.shape[0]):
        m = mask[c]
        if m.max() > 0:
            m = m - m.min()
            mask[c] = m / m.max()
    return mask


def segmentation(seg: torch.Tensor, patch: int, size: tuple[int, int]) -> np.ndarray:
    """(H, W) uint8 labels at the frame's original ``size`` = (H, W) from (1, C, h', w') soft labels."""
    up = F.interpolate(seg, scale_factor=patch, mode="bilinear", align_corners=False,
                       recompute_scale_factor=False)[0]
    _, labels = torch.max(norm_mask(up), dim=0)
    small = labels.squeeze().cpu().numpy().astype(np.uint8)
    return np.array(Image.fromarray(small).resize((size[1], size[0]), Image.NEAREST))
