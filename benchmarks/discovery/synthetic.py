"""SynthScenes for object discovery: ONE textured foreground object per image on a stuff
background, with its box in a Pascal VOC 2007 detection layout (the one the ``voc07`` reader
reads, so the real reader is what gets exercised):

    <root>/meta.json
    <root>/VOC2007/JPEGImages/<id>.jpg
    <root>/VOC2007/Annotations/<id>.xml        one <object>, 1-based inclusive <bndbox>
    <root>/VOC2007/ImageSets/Main/trainval.txt

One stuff texture fills the background; the object is placed anywhere in the image (not
centred) at a random size, so a box that
ignores the image (the whole frame, the centre) rarely reaches IoU 0.5. Drawing is
harness.data.synthetic's ``draw_scene`` (its validation stream, one object); every image has its
own RNG seeded by (seed, index).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


from PIL import Image

from harness.data.synthetic import draw_scene
from harness.data.generated import write_once
from harness.errors import ConfigError

GENERATOR_VERSION = 2
JPEG_QUALITY = 95  # as SynthScenes writes its JPEGs (4:4:4 chroma)


@dataclass(frozen=True)
class DiscoveryPreset:
    name: str
    image_size: int
    images: int


PRESETS = {
    "tiny": DiscoveryPreset("tiny", 64, 24),
    "small": DiscoveryPreset("small", 64, 240),
    "medium": DiscoveryPreset("medium", 96, 480),
}


def scenes(seed: int, count: int, size: int):
    """``count`` (scene index, image (S, S, 3) uint8, class name, box (x0, y0, x1, y1) of the visible
    pixels, max exclusive): SynthScenes' validation scenes drawn with one object (diameter 1/4 to
    5/8 of the side, anywhere in the frame), those on ONE stuff background, in index order; never a
    pretraining image."""
    index = 0
    while count:
        d = draw_scene(seed, "val", index, size, max_objects=1)
        if len(d.background) == 1:
            yield index, d.image, d.objects[0]["class"], tuple(d.objects[0]["bbox"])
            count -= 1
        index += 1


def voc_xml(stem: str, size: int, name: str, box) -> str:
    """A VOC annotation with one object; the box written 1-based inclusive (xmin = x0 + 1)."""
    x0, y0, x1, y1 = box
    return (f"<annotation><folder>VOC2007</folder><filename>{stem}.jpg</filename>"
            f"<size><width>{size}</width><height>{size}</height><depth>3</depth></size>"
            f"<segmented>0</segmented><object><name>{name}</name><pose>Unspecified</pose>"
            f"<truncated>0</truncated><difficult>0</difficult><bndbox><xmin>{x0 + 1}</xmin>"
            f"<ymin>{y0 + 1}</ymin><xmax>{x1}</xmax><ymax>{y1}</ymax></bndbox></object></annotation>\n")


def _meta(preset: str, seed: int) -> dict:
    cfg = PRESETS[preset]
    return {"generator": "synthscenes", "set": "discovery", "preset": preset, "seed": seed,
            "version": GENERATOR_VERSION, "image_size": cfg.image_size, "images": cfg.images}


def _write(root: Path, preset: str, seed: int, progress: bool) -> None:
    cfg = PRESETS[preset]
    voc = root / "VOC2007"
    for sub in ("JPEGImages", "Annotations", "ImageSets/Main"):
        (voc / sub).mkdir(parents=True, exist_ok=True)
    stems = []
    for index, image, name, box in scenes(seed, cfg.images, cfg.image_size):
        stem = f"{index:06d}"
        Image.fromarray(image).save(voc / "JPEGImages" / f"{stem}.jpg", "JPEG", quality=JPEG_QUALITY, subsampling=0)
        (voc / "Annotations" / f"{stem}.xml").write_text(voc_xml(stem, cfg.image_size, name, box))
        stems.append(stem)
    (voc / "ImageSets" / "Main" / "trainval.txt").write_text("".join(f"{s}\n" for s in stems))


def generate(out_dir, preset: str = "small", seed: int = 0, progress: bool = True) -> Path:
    """Write the discovery set under ``out_dir`` (once: harness.data.generated.write_once)."""
    if preset not in PRESETS:
        raise ConfigError(f"unknown SynthScenes discovery preset {preset!r}; choose one of {', '.join(PRESETS)}")
    return write_once(out_dir, _meta(preset, seed), lambda tmp: _write(tmp, preset, seed, progress))
