"""The segmentation data sets the protocols accept, by name or alias, and how mmseg reads
each: its dataset class, label convention, folder layout, the sizes of its pipeline and
CrIBo's iteration budgets for it. The data layer (harness/data) reads the files; what the
protocols do with them is set here."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from harness.errors import ConfigError


@dataclass(frozen=True)
class MmsegLayout:
    """How mmsegmentation's dataset config reads a dataset, with sizes relative to the 512
    crop its configs assume."""

    name: str
    mmseg_type: str
    num_classes: int
    long_iters: int                                 # CrIBo's *-160k / *-80k configs
    short_iters: int                                # its Segmenter-only *-40k / *-20k configs
    reduce_zero_label: bool
    layout: Literal["ade", "voc", "context", "coco_stuff"]
    scale_ratio: tuple[float, float] = (4.0, 1.0)  # Resize scale / crop: (2048, 512) at 512
    train_crop_ratio: float = 1.0                   # pipeline RandomCrop / crop (Context: 480 / 512)
    pad_train: bool = False                         # voc12aug's extra Pad(crop) in the pipeline
    seg_map_suffix: str = ".png"


_CONTEXT_SIZES = dict(scale_ratio=(520 / 512, 520 / 512), train_crop_ratio=480 / 512)

# By dataset-registry name (harness.registry.DATASETS: the readers, or the data sets only mmseg reads).
LAYOUTS = {layout.name: layout for layout in (
    MmsegLayout("voc12aug", "PascalVOCDataset", 21, 80_000, 20_000, False, "voc", pad_train=True),
    MmsegLayout("ade20k", "ADE20KDataset", 150, 160_000, 40_000, True, "ade"),
    # CrIBo's configs/_base_/datasets/pascal_context.py: 60 classes (background included).
    MmsegLayout("pascal_context", "PascalContextDataset", 60, 80_000, 20_000, False, "context", **_CONTEXT_SIZES),
    # mmseg's pascal_context_59.py: background ignored (reduce_zero_label).
    MmsegLayout("pascal_context_59", "PascalContextDataset59", 59, 80_000, 20_000, True, "context",
                **_CONTEXT_SIZES),
    MmsegLayout("coco_stuff164k", "COCOStuffDataset", 171, 160_000, 40_000, False, "coco_stuff",
                seg_map_suffix="_labelTrainIds.png"),
)}

# Other names the protocols accept. synth_*: SynthScenes' copies of the layouts (any root with
# a SynthScenes meta.json is read with its own class names whatever the name used).
ALIASES = {"ade": "ade20k", "coco_stuff": "coco_stuff164k", "pascal_context_60": "pascal_context",
           "synth_ade": "ade20k", "synth_voc": "voc12aug", "voc": "voc12aug"}


def mmseg_layout(name: str) -> MmsegLayout:
    """How mmseg reads the data set ``name`` (a key of LAYOUTS or an alias)."""
    layout = LAYOUTS.get(ALIASES.get(name, name))
    if layout is None:
        raise ConfigError(f"segmentation dataset {name!r} is unknown; choose one of "
                          f"{', '.join(LAYOUTS)} (aliases: {', '.join(sorted(ALIASES))})")
    return layout
