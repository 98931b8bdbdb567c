"""What the linear-probe parity check against DINO's eval_linear.py runs on, shared by the
generator of the reference numbers (benchmarks/classification/reference/gen_linear_dino.py, which runs DINO's
code) and the test that recomputes the harness side (benchmarks/classification/tests/test_linear_probe_dino_parity.py).
Nothing here imports DINO's code.

DINO trains its LinearClassifier on features its frozen ViT computes from images; here the
features are given (cached), in the layout DINO's `train` / `validate_network` read them:
per image a (n_last_blocks, 2, d) tensor, for each of the last n blocks the [CLS] token and
(token 1) the mean of the final-normed patch tokens. A stand-in model's
`get_intermediate_layers(x, n)` returns ``[x[:, i] for i in range(n)]``, so DINO's own lines
build the probe input: ``cat([x[:, 0] ...])`` and, with avgpool, the mean over tokens 1: (one
token: the patch mean itself) interleaved with the CLS.

Cases:
Every case runs two learning rates (the recipe's 0.001, and a larger one that learns more in
10 epochs): two official runs from the same initial weights, on the harness side one 2-head
grid (the harness trains every lr of a recipe at once).

- ``random_features``: seeded Gaussian class clusters (no model).
- ``vit_cpu_tiny_cls``: the harness's cached features of SynthScenes object images
  (random-init vit_cpu_tiny, Resize 64 -> CenterCrop 64) with the dino recipe's feature
  choice for a narrow ViT: CLS of the last 3 blocks (all of them), concatenated.
- ``vit_cpu_tiny_cls_avgpool``: the same images with DINO's ViT-B choice: last CLS and
  patch mean, interleaved (feature_layout: interleave).

The features DINO's code was run on are committed beside the fixture (FEATURES_FILE): float
features extracted on another CPU differ in their last bits (other kernels sum in another
order), so the test feeds the stored ones rather than features recomputed where it runs.
"""
from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import torch

CASES = {
    "random_features": dict(kind="random", seed=5, n_train=500, n_val=200, dim=128, num_classes=10,
                            spread=0.35, n_last_blocks=1, avgpool=False, base_lrs=[0.001, 0.01],
                            batch_size=64, epochs=10, init_seed=7),
    "vit_cpu_tiny_cls": dict(kind="images", n_last_blocks=3, avgpool=False, base_lrs=[0.001, 0.1],
                             batch_size=32, epochs=10, init_seed=11),
    "vit_cpu_tiny_cls_avgpool": dict(kind="images", n_last_blocks=1, avgpool=True, base_lrs=[0.001, 0.1],
                                     batch_size=32, epochs=10, init_seed=13),
}
# Object-centric SynthScenes images (12 classes) in the ImageFolder layout.
IMAGES = {"generator": "harness.data.synthetic.draw_object", "seed": 0, "size": 64,
          "n_train": 240, "n_val": 120, "jpeg_quality": 95}
MODEL = {"arch": "vit_cpu_tiny", "init_seed": 0}
# DistributedSampler's default seed: DINO builds `DistributedSampler(dataset_train)`.
SAMPLER_SEED = 0
# Beside linear_dino_parity.json: every case's train/val features and labels, as DINO got them.
FEATURES_FILE = "linear_dino_parity_features.npz"
TOKEN_KEYS = ("train", "train_y", "val", "val_y")


def sha256(*arrays) -> str:
    h = hashlib.sha256()
    for a in arrays:
        a = np.ascontiguousarray(np.asarray(a))
        h.update(str(a.dtype).encode() + str(a.shape).encode())
        h.update(a.tobytes())
    return h.hexdigest()


def save_tokens(path: str | Path, tokens: dict[str, dict]) -> None:
    """{case: case_tokens(...)} into one compressed .npz (arrays named "<case>/<key>", np.load
    reads it). Written with fixed zip timestamps, so the same arrays give the same bytes (the
    fixture records the file's sha256)."""
    import zipfile

    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, t in tokens.items():
            for k in TOKEN_KEYS:
                info = zipfile.ZipInfo(f"{name}/{k}.npy", date_time=(1980, 1, 1, 0, 0, 0))
                info.compress_type = zipfile.ZIP_DEFLATED
                with zf.open(info, "w") as f:
                    np.lib.format.write_array(f, np.ascontiguousarray(t[k]), allow_pickle=False)


def load_tokens(path: str | Path) -> dict[str, dict]:
    """What save_tokens wrote: {case: {"train", "train_y", "val", "val_y"}}."""
    out: dict[str, dict] = {}
    with np.load(path) as z:
        for key in z.files:
            name, k = key.rsplit("/", 1)
            out.setdefault(name, {})[k] = z[key]
    return out


def sha256_file(path: str | Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def decode(packed: dict) -> np.ndarray:
    """A float32 array as the generator stores it (shape + little-endian bytes, base64)."""
    import base64

    return np.frombuffer(base64.b64decode(packed["float32_le_base64"]), dtype="<f4").reshape(packed["shape"])


def build_image_folder(root: str | Path) -> Path:
    """root/{train,val}/<class>/obj_<split>_<i>.jpg; classes round-robin, so balanced."""
    from PIL import Image

    from harness.data.synthetic import THING_CLASSES, draw_object, object_class

    root = Path(root)
    for split in ("train", "val"):
        for i in range(IMAGES[f"n_{split}"]):
            path = root / split / THING_CLASSES[object_class(split, i)] / f"obj_{split}_{i:06d}.jpg"
            if path.is_file():
                continue
            path.parent.mkdir(parents=True, exist_ok=True)
            d = draw_object(IMAGES["seed"], split, i, IMAGES["size"])
            Image.fromarray(d.image).save(path, "JPEG", quality=IMAGES["jpeg_quality"], subsampling=0)
    return root


def probe(case: dict, **over):
    """The harness's dino recipe with this case's settings (a LinearProbe)."""
    from benchmarks.classification.linear_probe import LinearProbe

    values = {"dataset": "imagefolder", "crop": IMAGES["size"], "resize": IMAGES["size"],
              "base_lrs": case["base_lrs"], "batch_size": case["batch_size"], "epochs": case["epochs"],
              "n_last_blocks": case["n_last_blocks"], "avgpool_patchtokens": case["avgpool"],
              "seed": 0, "progress": False, **over}
    return LinearProbe.from_preset("dino", values)


def make_model():
    from harness.models.handle import ModelHandle

    return ModelHandle.random_init(MODEL["arch"], seed=MODEL["init_seed"])


def case_tokens(case: dict, image_root: Path | None = None) -> dict:
    """{"train": (N, n, 2, d) float32, "val": ..., "train_y", "val_y" int64} for a case.

    Image cases: the features LinearProbe.run(cached_features=True) trains on, from the
    harness's feature cache (extract_features with the recipe's val transform)."""
    if case["kind"] == "random":
        rng = np.random.default_rng(case["seed"])
        c, d = case["num_classes"], case["dim"]
        means = rng.standard_normal((c, d)).astype(np.float32) * case["spread"]
        out = {}
        for split in ("train", "val"):
            y = rng.integers(0, c, case[f"n_{split}"])
            x = means[y] + rng.standard_normal((len(y), d)).astype(np.float32)
            tok = np.zeros((len(y), 1, 2, d), np.float32)
            tok[:, 0, 0] = x
            out[split], out[f"{split}_y"] = tok, y.astype(np.int64)
        return out
    from harness.probes.labelled_features import load_splits
    from harness.features.extract import extract_features

    model = make_model()
    p = probe(case, cached_features=True)
    splits = load_splits("imagefolder", image_root, "train", "val")
    out = {"train_y": splits.train_labels, "val_y": splits.val_labels}
    for split, src in (("train", splits.train), ("val", splits.val)):
        fs = extract_features(model, src, p.val_transform(), n_last_blocks=case["n_last_blocks"], final_norm=True,
                              batch_size=64, progress=False)
        out[split] = np.stack([np.asarray(fs.cls), np.asarray(fs.patch_mean)], axis=2).astype(np.float32)
    return out


def probe_input(tokens: np.ndarray, case: dict) -> torch.Tensor:
    """The harness's probe input from (N, n, 2, d) tokens: classification_common.assemble
    with the dino recipe's layout (interleave)."""
    from harness.probes.labelled_features import assemble

    t = torch.from_numpy(tokens)
    return assemble(t[:, :, 0], t[:, :, 1], n_last_blocks=case["n_last_blocks"], avgpool=case["avgpool"],
                    layout="interleave")


def sampler_epochs(n: int, epochs: int) -> list[list[int]]:
    """The order DINO's DistributedSampler(dataset_train) gives with one process, per epoch
    (torch's own sampler, seed 0, set_epoch(epoch))."""
    from torch.utils.data import DistributedSampler

    s = DistributedSampler(range(n), num_replicas=1, rank=0, shuffle=True, seed=SAMPLER_SEED)
    out = []
    for e in range(epochs):
        s.set_epoch(e)
        out.append([int(i) for i in s])
    return out
