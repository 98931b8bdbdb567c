"""What the segmentation protocols set per data set (by the names of harness.data.mmseg_layouts,
which says how mmseg reads each): CrIBo's iteration budgets and the sizes of mmseg's pipelines for
it, relative to the 512 crop its configs assume."""
from __future__ import annotations

from dataclasses import dataclass

from harness.data.mmseg_layouts import mmseg_layout


@dataclass(frozen=True)
class SegSizes:
    long_iters: int                                 # CrIBo's *-160k / *-80k configs
    short_iters: int                                # its Segmenter-only *-40k / *-20k configs
    scale_ratio: tuple[float, float] = (4.0, 1.0)   # Resize scale / crop: (2048, 512) at 512
    train_crop_ratio: float = 1.0                   # pipeline RandomCrop / crop (Context: 480 / 512)
    pad_train: bool = False                         # voc12aug's extra Pad(crop) in the pipeline


_CONTEXT_SIZES = dict(scale_ratio=(520 / 512, 520 / 512), train_crop_ratio=480 / 512)

SIZES = {
    "voc12aug": SegSizes(80_000, 20_000, pad_train=True),
    "ade20k": SegSizes(160_000, 40_000),
    "pascal_context": SegSizes(80_000, 20_000, **_CONTEXT_SIZES),
    "pascal_context_59": SegSizes(80_000, 20_000, **_CONTEXT_SIZES),
    "coco_stuff164k": SegSizes(160_000, 40_000),
}


def seg_sizes(name: str) -> SegSizes:
    """The budgets and pipeline sizes of data set ``name`` (a name mmseg_layout knows, or an alias)."""
    return SIZES[mmseg_layout(name).name]
