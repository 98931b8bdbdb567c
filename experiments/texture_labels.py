"""SynthScenes' scene split with every object labelled by its texture alone.

    python -m experiments.texture_labels SYNTH_ROOT OUT

A SynthScenes object class is texture x shape (``striped_disc``...). OUT gets a VOC layout
of the same scenes (JPEGs linked, not copied) whose masks merge the shapes: the 4 stuff
classes, then one class per texture. Dense NN on OUT then asks only for what a few hundred
pretraining steps can learn (the shape factor stays at chance: docs/findings/synthscenes.md):

    ssl-bench eval --protocol dense_nn --preset cribo --dataset voc --data-root OUT ...
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
from pathlib import Path

import numpy as np
from PIL import Image

from harness.data.synthetic import (SEG_CLASSES, STUFF_CLASSES, TEXTURES, load_meta, save_gray_png,
                                     save_palette_png)
from harness.errors import DataError


def texture_label_map() -> tuple[np.ndarray, list[str]]:
    """(lookup table old label -> new label, new class names); 255 (ignore) stays 255."""
    names = list(STUFF_CLASSES) + list(TEXTURES)
    lut = np.arange(256, dtype=np.uint8)
    for label, name in enumerate(SEG_CLASSES):
        lut[label] = names.index(name) if name in STUFF_CLASSES else names.index(name.split("_")[0])
    return lut, names


def write_texture_voc(root: Path, out: Path) -> Path:
    meta = load_meta(root)
    if list(meta["classes"]["voc"]) != list(SEG_CLASSES):
        raise DataError(f"{root} holds classes {meta['classes']['voc']}, not this generator's {list(SEG_CLASSES)}")
    if out.exists():
        raise DataError(f"{out} exists; choose a new folder")
    lut, names = texture_label_map()
    voc, new = root / "VOC2012", out / "VOC2012"
    new.mkdir(parents=True)
    os.symlink((voc / "JPEGImages").resolve(), new / "JPEGImages")
    shutil.copytree(voc / "ImageSets", new / "ImageSets")
    # The generator's own mask writers: palette PNGs for the VOC masks, grey ones for the aug set.
    for folder, save in (("SegmentationClass", save_palette_png), ("SegmentationClassAug", save_gray_png)):
        (new / folder).mkdir()
        for path in sorted((voc / folder).glob("*.png")):
            save(lut[np.asarray(Image.open(path))], new / folder / path.name)
    meta["classes"] = {**meta["classes"], "voc": names}
    meta["derived"] = {"from": str(root), "labels": "texture only (shapes merged)"}
    (out / "meta.json").write_text(json.dumps(meta, indent=2) + "\n")
    return out


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("root", type=Path, help="a SynthScenes root")
    ap.add_argument("out", type=Path)
    args = ap.parse_args(argv)
    print(write_texture_voc(args.root, args.out))


if __name__ == "__main__":
    main()
