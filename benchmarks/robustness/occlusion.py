"""Scoring the head on patch-dropped validation images (benchmarks.robustness.patch_drop): the
saliency of each image from a ViT's [CLS] attention (the evaluated model's own, another model's, or
stored attention rows), then the same images with the salient or the non-salient patches zeroed."""
from __future__ import annotations

from pathlib import Path
from typing import Callable

import numpy as np
import torch

from benchmarks.robustness.patch_drop import cls_attention, drop_patches, salient_patches
from harness.errors import DataError


def stored_attention(path: Path, n_images: int, n_patches: int) -> torch.Tensor:
    """(N, h*w) attention rows saved with numpy (``.npy``), one per validation image in reader order."""
    if not path.is_file():
        raise DataError(f"saliency attention file {path} not found; save (N, h*w) [CLS] attention rows with "
                        f"numpy.save, or set saliency: self")
    rows = np.load(path)
    if rows.shape != (n_images, n_patches):
        raise DataError(f"{path}: shape {rows.shape}, expected ({n_images}, {n_patches}): one attention row "
                        f"per validation image over its {n_patches} patches")
    return torch.from_numpy(rows.astype(np.float32))


def drop_and_score(saliency, val, labels: np.ndarray, transform, logits_of: Callable, *, stride: int, mass: float,
                   drops, head: int, batch_size: int, device, fill=None) -> dict:
    """{drop: (hits (N,) bool, fraction of patches dropped (N,))}. ``saliency``: a ViT backbone
    whose [CLS] attention ranks the patches, or the path of stored attention rows (``.npy``)."""
    out = {d: ([], []) for d in drops}
    stored = None
    for a in range(0, len(val), batch_size):
        idx = range(a, min(a + batch_size, len(val)))
        x = torch.stack([transform(val.load_image(i)) for i in idx]).to(device)
        grid = (x.shape[-2] // stride, x.shape[-1] // stride)
        if not isinstance(saliency, Path):
            with torch.no_grad():
                att = cls_attention(saliency, x, head)
        else:
            if stored is None:
                stored = stored_attention(saliency, len(val), grid[0] * grid[1])
            att = stored[a:a + len(idx)].to(device)
        top = salient_patches(att, mass)
        for d in drops:
            dropped, fraction = drop_patches(x, top, grid, d, fill)
            pred = logits_of(dropped).argmax(1).cpu().numpy()
            out[d][0].append(pred == labels[a:a + len(idx)])
            out[d][1].append(fraction.cpu().numpy())
    return {d: (np.concatenate(h), np.concatenate(f)) for d, (h, f) in out.items()}
