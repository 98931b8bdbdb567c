"""Dense nearest-neighbour retrieval's declaration (harness.declaration)."""
from harness.declaration import ProtocolDeclaration
from harness.metrics import Metric

DECLARATIONS = (
    ProtocolDeclaration(
        name="dense_nn", module="benchmarks.dense_nn.protocol",
        metrics=(Metric("mIoU", unit="%", per_image=("areas", "confusion")),
                 Metric("pixel_accuracy", unit="%", per_image=("areas", "confusion"), label="pixel acc")),
        headline="mIoU", variant_labels={"fraction": "{}"},
        reads=("voc", "ade20k"),
        summary="patch-level k-NN segmentation with training-set subsampling (CrIBo, Hummingbird)"),
)
