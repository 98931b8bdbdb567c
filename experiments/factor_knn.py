"""What a checkpoint's features know about the two factors of SynthScenes' object classes.

An object-centric class is texture x shape (3 x 4 = 12 classes, e.g. ``striped_disc``).
The weighted k-NN of the `knn` protocol (synth preset) is run three times on the same
features: on the 12 classes, on the texture alone (3 classes, chance 33.3) and on the
shape alone (4 classes, chance 25.0). A flat 12-class number then says which factor is
missing. Random init is always included; ``--reference supervised simclr`` adds the
yardsticks of ``reference_learners.py`` (trained here, a few minutes on 2 cores).

    python -m experiments.factor_knn CKPT [CKPT ...] [--feature cls avgpool]
        [--reference supervised simclr]
"""
from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from harness.probes.labelled_features import feature_for
from benchmarks.classification.knn import weighted_knn
from experiments.reference_learners import REFERENCES
from harness.models.backbone import ARCHS
from harness.data.synthetic import default_root, generate
from harness.errors import DataError
from harness.protocol_info import build_protocol
from harness.models.handle import ModelHandle


def factor_labels(class_names: list[str], labels) -> dict[str, np.ndarray]:
    """Class index -> texture and shape index (class names are ``<texture>_<shape>``)."""
    odd = [n for n in class_names if n.count("_") != 1]
    if odd:
        raise DataError(f"class folders must be named <texture>_<shape> (SynthScenes object-centric), "
                        f"found {odd[:5]}")
    textures = sorted({n.split("_")[0] for n in class_names})
    shapes = sorted({n.split("_")[1] for n in class_names})
    tex = np.array([textures.index(n.split("_")[0]) for n in class_names])
    shp = np.array([shapes.index(n.split("_")[1]) for n in class_names])
    labels = np.asarray(labels)
    return {"class": labels, "texture": tex[labels], "shape": shp[labels]}


def factor_knn(model: ModelHandle, root: Path, feature: str = "cls", k: int = 20) -> dict[str, float]:
    """k-NN top-1 on the class, the texture and the shape of object-centric SynthScenes."""
    knn = build_protocol("knn", "synth", {"dataset": "imagefolder", "feature": feature, "progress": False})
    c = knn.cfg
    splits, f_train, f_val = knn.extract(model, root / "imagenet")
    train = feature_for(feature, f_train.cls, f_train.patch_mean, c.n_last_blocks)
    val = feature_for(feature, f_val.cls, f_val.patch_mean, c.n_last_blocks)
    y_train = factor_labels(splits.classes, splits.train_labels)
    y_val = factor_labels(splits.classes, splits.val_labels)
    return {f"{name}_top1": weighted_knn(train, y_train[name], val, y_val[name], ks=[k],
                                         temperature=c.temperature, backend=c.backend)[k]["top1"]
            for name in ("class", "texture", "shape")}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("checkpoints", nargs="*", type=Path, help="harness checkpoints (.safetensors)")
    ap.add_argument("--feature", nargs="+", choices=["cls", "avgpool"], default=["cls", "avgpool"])
    ap.add_argument("--arch", default="vit_cpu_tiny", choices=sorted(ARCHS), help="random-init reference")
    ap.add_argument("--data-root", type=Path, default=None, help="SynthScenes root (default: generated small)")
    ap.add_argument("--reference", nargs="*", default=[], choices=sorted(REFERENCES),
                    help="also train and probe these reference learners")
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args(argv)
    torch.set_num_threads(a.threads)
    root = a.data_root or default_root("small", 0)
    if a.data_root is None:
        generate(root, "small", 0)
    models = [ModelHandle.random_init(a.arch, seed=0, name="random init")]
    models += [ModelHandle.from_checkpoint(p, name=p.parent.name or p.stem) for p in a.checkpoints]
    models += [REFERENCES[name](root, arch=a.arch) for name in a.reference]
    rows = [{"model": m.name, "feature": f, **factor_knn(m, root, f)} for m in models for f in a.feature]
    print(pd.DataFrame(rows).to_string(index=False, float_format=lambda v: f"{v:.1f}"))


if __name__ == "__main__":
    main()
