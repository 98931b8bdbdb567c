"""What the hbird end-to-end parity check runs on, shared by the generator of the reference
numbers (benchmarks/dense_nn/reference/gen_hbird_e2e.py, which also runs open-hummingbird-eval) and the
test that recomputes the harness side (benchmarks/dense_nn/tests/test_dense_nn_hbird_e2e.py). Nothing here
imports the reference's code.

The data set: SynthScenes scenes (harness.data.synthetic.draw_scene) drawn at 96 px and
cropped to rectangles of several sizes and aspects, so that the evaluation's square resize
to 64 px shrinks some images and enlarges others; every aspect lies in [3/4, 4/3], where
the reference's RandomResizedCrop with scale (1, 1) takes the whole image. VOC's 255
boundary label is written on every pixel whose right or lower neighbour has another class,
so the bank's 255 -> background rule and the metric's ignore index are both exercised.
Written twice over the same files: the Pascal VOC 2012 layout this harness reads
(`VOC2012/`, no SynthScenes meta.json, so 21 VOC classes as in the reference) and the
layout open-hummingbird-eval's VOCDataModule reads (`hbird_voc/`: images/,
SegmentationClass/, SegmentationClassAug/, sets/{trainaug,val}.txt), as symlinks.
"""
from __future__ import annotations

import hashlib
import os
from pathlib import Path

import numpy as np
from PIL import Image

DATA = {
    "generator": "harness.data.synthetic.draw_scene",
    "seed": 0,
    "n_train": 24,
    "n_val": 12,
    "draw_size": 96,
    # (width, height) of image i: CROPS[i % len(CROPS)], the top-left corner of the drawing
    "crops": [[96, 80], [64, 80], [80, 64], [56, 64], [96, 96], [48, 56]],
    "boundary": "255 where the right or lower neighbour has another label",
    "jpeg_quality": 95,
}
MODEL = {"arch": "vit_cpu_tiny", "init_seed": 0}
# Beside hbird_e2e.json: the model's weights as the reference got them (see make_model).
MODEL_FILE = "hbird_e2e_model.safetensors"
# The hbird preset's values with these changed: SynthScenes-sized input (as
# benchmarks/dense_nn/presets/dense_nn_hbird_synth.yaml), one run over the whole training split.
INPUT_SIZE = 64
BATCH_SIZE = 16
# Augmented runs: the reference with the harness's draws replayed (exact comparison), and
# each side with its own random streams (statistical comparison).
REPLAY_SEEDS = [0, 1, 2]
OFFICIAL_AUG_SEEDS = list(range(200))
HARNESS_AUG_SEEDS = list(range(40))


def _boundary(label: np.ndarray) -> np.ndarray:
    out = label.copy()
    edge = np.zeros(label.shape, bool)
    edge[:, :-1] |= label[:, :-1] != label[:, 1:]
    edge[:-1, :] |= label[:-1, :] != label[1:, :]
    out[edge] = 255
    return out


def _palette() -> list[int]:
    from harness.data.synthetic import voc_palette

    return voc_palette()


def build_dataset(root: str | Path) -> dict:
    """Write the data set under ``root`` (idempotent: same bytes every time) and return
    {"harness_root", "hbird_root", "sha256"}; sha256 hashes every file's name and bytes."""
    from harness.data.synthetic import draw_scene

    root = Path(root)
    voc = root / "VOC2012"
    for d in ("JPEGImages", "SegmentationClass", "SegmentationClassAug", "ImageSets/Segmentation"):
        (voc / d).mkdir(parents=True, exist_ok=True)
    stems = {"train": [], "val": []}
    for split, n in (("train", DATA["n_train"]), ("val", DATA["n_val"])):
        for i in range(n):
            stem = f"{split}_{i:06d}"
            d = draw_scene(DATA["seed"], split, i, DATA["draw_size"])
            w, h = DATA["crops"][i % len(DATA["crops"])]
            image = np.ascontiguousarray(d.image[:h, :w])
            label = _boundary(d.label[:h, :w])
            Image.fromarray(image).save(voc / "JPEGImages" / f"{stem}.jpg", "JPEG",
                                        quality=DATA["jpeg_quality"], subsampling=0)
            if split == "train":
                Image.fromarray(label).save(voc / "SegmentationClassAug" / f"{stem}.png", "PNG")
            else:
                im = Image.fromarray(label)
                im.putpalette(_palette())
                im.save(voc / "SegmentationClass" / f"{stem}.png", "PNG")
            stems[split].append(stem)
    lists = {"trainaug": "\n".join(stems["train"]) + "\n", "val": "\n".join(stems["val"]) + "\n"}
    for name, text in lists.items():
        (voc / "ImageSets" / "Segmentation" / f"{name}.txt").write_text(text)

    hb = root / "hbird_voc"
    (hb / "sets").mkdir(parents=True, exist_ok=True)
    for link, target in (("images", "JPEGImages"), ("SegmentationClass", "SegmentationClass"),
                         ("SegmentationClassAug", "SegmentationClassAug")):
        p = hb / link
        if not p.is_symlink():
            os.symlink(Path("..") / "VOC2012" / target, p)
    for name, text in lists.items():
        (hb / "sets" / f"{name}.txt").write_text(text)

    h = hashlib.sha256()
    for p in sorted(voc.rglob("*")):
        if p.is_file():
            h.update(p.relative_to(root).as_posix().encode())
            h.update(p.read_bytes())
    return {"harness_root": root, "hbird_root": hb, "sha256": h.hexdigest()}


def make_model(weights: str | Path | None = None):
    """random_init(vit_cpu_tiny, seed 0), with ``weights`` (a MODEL_FILE) loaded over it when
    given: the weights the reference was run on. torch's init kernels round differently from one
    CPU kernel set to another, so the random init of another machine differs in its last bits."""
    from harness.models.handle import ModelHandle

    model = ModelHandle.random_init(MODEL["arch"], seed=MODEL["init_seed"])
    if weights is not None:
        from safetensors.torch import load_file

        model.backbone.load_state_dict(load_file(str(weights)), strict=True)
    return model


def save_model(model, path: str | Path) -> None:
    """The backbone's weights as MODEL_FILE (safetensors: the same tensors give the same bytes)."""
    from safetensors.torch import save_file

    save_file({k: v.detach().cpu().contiguous() for k, v in model.backbone.state_dict().items()}, str(path))


def harness_values(bank_augment: str, seed: int) -> dict:
    """Overrides of the hbird preset for one run (1/1 of the training split, one seed)."""
    return {"dataset": "voc", "input_size": INPUT_SIZE, "bank_augment": bank_augment,
            "fractions": ["1/1"], "seeds": [seed], "batch_size": BATCH_SIZE, "threads": 1,
            "progress": False}


def run_harness(data_root: Path, model, bank_augment: str, seed: int, artifacts_dir: Path) -> dict:
    """The harness's hbird preset through the protocol's own entry (DenseNN.run: dataset
    readers, transforms, feature extraction, bank, search, metric): {"miou" (fraction, as the
    reference returns it), "confusion" (21 x 21 pixel counts), "bank_size"}."""
    from benchmarks.dense_nn.protocol import DenseNN

    values = dict(harness_values(bank_augment, seed), artifacts_dir=str(artifacts_dir))
    (res,) = DenseNN.from_preset("hbird", values).run(model, data_root)
    conf = np.load(res.artifacts["confusion"])
    return {"miou": res.metrics["mIoU"] / 100.0, "confusion": conf, "bank_size": res.params["bank_size"]}
