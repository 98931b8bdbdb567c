"""The mmsegmentation protocols' declarations (harness.declaration)."""
from harness.declaration import ProtocolDeclaration
from harness.metrics import Metric

_READS = ("ade20k", "voc", "voc12aug", "pascal_context", "pascal_context_59", "coco_stuff164k")
_SEGMENTATION = (Metric("mIoU", unit="%", per_image="areas"),
                 Metric("aAcc", unit="%", per_image="areas", label="pixel acc"),
                 Metric("mAcc", unit="%", per_image="areas", label="mean class acc"))

DECLARATIONS = (
    ProtocolDeclaration(name="seg_linear", module="benchmarks.segmentation.seg_linear", metrics=_SEGMENTATION,
                        headline="mIoU", reads=_READS,
                        summary="linear segmentation on a frozen backbone (mmsegmentation)"),
    ProtocolDeclaration(name="segmenter", module="benchmarks.segmentation.segmenter", metrics=_SEGMENTATION,
                        headline="mIoU", reads=_READS, summary="Segmenter finetuning (mmsegmentation)"),
)
