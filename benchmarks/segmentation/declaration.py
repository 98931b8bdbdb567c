"""The mmsegmentation protocols' declarations (harness.declaration)."""
from harness.declaration import ProtocolDeclaration
from harness.metrics import Metric

_SEGMENTATION = (Metric("mIoU", unit="%", per_image="areas"),
                 Metric("aAcc", unit="%", per_image="areas", label="pixel acc"),
                 Metric("mAcc", unit="%", per_image="areas", label="mean class acc"))

DECLARATIONS = (
    ProtocolDeclaration(name="seg_linear", module="benchmarks.segmentation.seg_linear", metrics=_SEGMENTATION,
                        headline="mIoU", summary="linear segmentation on a frozen backbone (mmsegmentation)"),
    ProtocolDeclaration(name="segmenter", module="benchmarks.segmentation.segmenter", metrics=_SEGMENTATION,
                        headline="mIoU", summary="Segmenter finetuning (mmsegmentation)"),
)
