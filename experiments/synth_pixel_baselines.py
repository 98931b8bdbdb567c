"""How hard SynthScenes' dense task is without learning: patch-level k-NN on raw pixels.

    python -m experiments.synth_pixel_baselines [--root DIR] [--preset small]

Each 8x8 patch of the scene split (VOC layout, 64 px) is a sample, labelled by majority
vote; features are (1) the raw RGB values, (2) the grey values normalised per patch
(colour removed: texture only) and (3) the magnitude of the grey patch's 2-D FFT (texture,
shift-invariant). Cosine k-NN (k = 50, majority vote) from the train patches to the val
patches, mIoU over the classes present, at patch resolution. A random-init ViT sits near
(1); what pretraining can gain is roughly the distance to (2)-(3).
"""
from __future__ import annotations

import argparse
from pathlib import Path

import faiss
import numpy as np

from benchmarks.dense_nn.metric import compute_miou
from harness.data.segmentation import VOCSegmentation
from harness.data.synthetic import default_root, generate

PATCH = 8


def patches_and_labels(ds: VOCSegmentation) -> tuple[np.ndarray, np.ndarray]:
    xs, ys = [], []
    for i in range(len(ds)):
        img = np.asarray(ds.load_image(i), dtype=np.float32) / 255.0
        lab = np.asarray(ds.load_mask(i))
        g = img.shape[0] // PATCH
        xs.append(img.reshape(g, PATCH, g, PATCH, 3).transpose(0, 2, 1, 3, 4).reshape(g * g, PATCH, PATCH, 3))
        blocks = lab.reshape(g, PATCH, g, PATCH).transpose(0, 2, 1, 3).reshape(g * g, -1)
        ys.append(np.array([np.bincount(b, minlength=256).argmax() for b in blocks]))
    return np.concatenate(xs), np.concatenate(ys)


def features(p: np.ndarray, kind: str) -> np.ndarray:
    if kind == "rgb":
        f = p.reshape(len(p), -1)
    else:
        g = p.mean(-1)
        g = g - g.mean(axis=(1, 2), keepdims=True)
        if kind == "grey_normalised":
            f = g.reshape(len(p), -1) / (g.reshape(len(p), -1).std(1, keepdims=True) + 1e-3)
        else:  # grey_fft
            f = np.abs(np.fft.fft2(g)).reshape(len(p), -1)
    f = f - f.mean(0)
    return np.ascontiguousarray(f / (np.linalg.norm(f, axis=1, keepdims=True) + 1e-6), dtype=np.float32)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--root", default=None, help="SynthScenes root (default: the cached preset)")
    ap.add_argument("--preset", default="small")
    ap.add_argument("--k", type=int, default=50)
    args = ap.parse_args(argv)
    root = Path(args.root) if args.root else generate(default_root(args.preset, 0), args.preset, 0, progress=False)
    xt, yt = patches_and_labels(VOCSegmentation(root, "train"))
    xv, yv = patches_and_labels(VOCSegmentation(root, "val"))
    n_cls = int(max(yt.max(), yv.max())) + 1
    print(f"{len(xt)} train / {len(xv)} val patches, {n_cls} classes, k={args.k}")
    for kind in ("rgb", "grey_normalised", "grey_fft"):
        ft, fv = features(xt, kind), features(xv, kind)
        index = faiss.IndexFlatIP(ft.shape[1])
        index.add(ft)
        _, nn = index.search(fv, args.k)
        pred = np.array([np.bincount(yt[row], minlength=n_cls).argmax() for row in nn])
        conf = np.bincount(yv * n_cls + pred, minlength=n_cls * n_cls).reshape(n_cls, n_cls)
        res = compute_miou(conf)
        print(f"{kind:>16}: mIoU {100 * res.miou:6.2f}  pixel acc {100 * res.pixel_accuracy:6.2f}")


if __name__ == "__main__":
    main()
