"""What 'upernet' reports, as data (harness.declaration): read by the registry and every table
without importing the protocol."""
from harness.declaration import ProtocolDeclaration
from harness.metrics import Metric

DECLARATIONS = (
    ProtocolDeclaration(
        name="upernet", module="benchmarks.upernet.protocol",
        metrics=(Metric("mIoU", unit="%", per_image="areas"),
                 Metric("aAcc", unit="%", per_image="areas", label="pixel acc"),
                 Metric("mAcc", unit="%", per_image="areas", label="mean class acc")),
        headline="mIoU", reads=("ade20k",),
        summary="UperNet fine-tuning on a multi-level ViT (mmsegmentation; iBOT Table 6, SynCLR Table 7)"),
)
