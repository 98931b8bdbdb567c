"""What 'detection' reports, as data (harness.declaration): COCO box and mask AP (pycocotools'
COCOeval through mmdet's CocoMetric), higher is better."""
from harness.declaration import ProtocolDeclaration
from harness.metrics import Metric

DECLARATIONS = (
    ProtocolDeclaration(
        name="detection", module="benchmarks.detection.protocol",
        metrics=(Metric("box_AP", unit="%", label="box AP"),
                 Metric("mask_AP", unit="%", label="mask AP"),
                 Metric("box_AP50", unit="%", label="box AP50"),
                 Metric("box_AP75", unit="%", label="box AP75"),
                 Metric("mask_AP50", unit="%", label="mask AP50"),
                 Metric("mask_AP75", unit="%", label="mask AP75")),
        headline="box_AP",
        summary="Cascade Mask R-CNN fine-tuning on a multi-level backbone (mmdetection), COCO box / mask AP",
        synthetic="benchmarks.detection.synthetic", reads=("coco_instances",)),
)
