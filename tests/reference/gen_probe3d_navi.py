"""Regenerate tests/fixtures/probe3d_navi.json from Probe3D's own NAVI loader.

Runs mbanani/probe3d's ``evals.datasets.navi.NAVI`` unmodified (image_mean imagenet, augment_train
False, bbox_crop True, its fixed 512 x 512 frames) on the NAVI-layout part of probe3d SynthScenes
tiny (harness/data/synthetic_probe3d.py, seed 0, written to a temporary folder): for splits
``trainval`` and ``test``, the instances drawn and, per frame, the normalised image, the depth and
the surface normals computed from the depth of the first three frames (sums, sums of squares and
128 sampled values).

Substituted: ``glob.glob`` and ``os.listdir`` as navi.py calls them return their names sorted (the
official order is the file system's listing order, which differs between machines; the reader here
sorts). The transformers MAE helper evals/models/utils.py would import is not loaded (navi.py does
not import it). Needs albumentations and opencv-python-headless (the committed numbers: the
versions in the provenance; Probe3D pins albumentations 1.3.1, whose Resize with nearest
interpolation is the same cv2 call).
"""
from __future__ import annotations

import glob as _glob
import os as _os
import tempfile
import types
from pathlib import Path

import common

REPOSITORY = "https://github.com/mbanani/probe3d"
COMMIT = "a1f14640076e38b8bc07b66d0fe2d01d15691e9d"
FIXTURE = "probe3d_navi.json"
SAMPLES = 128
FRAMES = 3  # frames per split whose maps are recorded (every instance is listed)
SPLITS = ("trainval", "test")


def sampled(t, torch) -> dict:
    flat = t.detach().double().flatten()
    idx = torch.linspace(0, flat.numel() - 1, SAMPLES).round().long()
    return {"shape": list(t.shape), "sum": float(flat.sum()), "sum_sq": float((flat ** 2).sum()),
            "index": idx.tolist(), "values": flat[idx].tolist()}


def main() -> None:
    args = common.parse_args(__doc__, FIXTURE, REPOSITORY, COMMIT)
    import torch

    torch.set_num_threads(args.threads)
    from harness.data.synthetic_probe3d import generate

    navi = common.import_official(args.official, "evals.datasets.navi")
    navi.glob = types.SimpleNamespace(glob=lambda pattern: sorted(_glob.glob(pattern)))
    navi.os = types.SimpleNamespace(listdir=lambda p: sorted(_os.listdir(p)), path=_os.path)
    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        root = generate(Path(tmp) / "synth", preset="tiny", seed=0, progress=False)
        for split in SPLITS:
            ds = navi.NAVI(str(root), split, image_mean="imagenet", augment_train=False, bbox_crop=True)
            frames = []
            for i in range(FRAMES):
                item = ds[i]
                frames.append({"image": sampled(item["image"], torch), "depth": sampled(item["depth"], torch),
                               "snorm": sampled(item["snorm"], torch)})
            out[split] = {"instances": [list(x) for x in ds.instances], "frames": frames}
    data = {
        "provenance": common.provenance(
            args, __file__, {"dataset": "probe3d SynthScenes tiny, NAVI part, seed 0", "image_mean": "imagenet",
                             "augment_train": False, "bbox_crop": True, "splits": list(SPLITS), "samples": SAMPLES,
                             "frames": FRAMES},
            common.loaded_official_files(args.official), extra_modules=("albumentations", "cv2", "torchvision"),
            notes="glob.glob and os.listdir in navi.py sorted"),
        "how": "evals.datasets.navi.NAVI items on the SynthScenes NAVI set",
        "frames": out,
    }
    common.compare_with_committed(data, args.out)
    common.write_fixture(args.out, data)


if __name__ == "__main__":
    main()
