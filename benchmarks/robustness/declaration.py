"""Robustness of the linear head: its declaration (harness.declaration), torch-free."""
from harness.declaration import ProtocolDeclaration
from harness.metrics import Metric

DECLARATIONS = (
    ProtocolDeclaration(
        name="robustness", module="benchmarks.robustness.protocol",
        metrics=(Metric("top1", unit="%", per_image="hits", label="top-1"),
                 Metric("mCE", unit="%", direction="lower", per_image="means", label="mCE")),
        headline="top1", variant_labels={"shift": "{}"},
        synthetic="benchmarks.robustness.synthetic",
        reads=("imagenet", "imagefolder", "imagenet_v2", "imagenet_c", "backgrounds_challenge"),
        summary="a linear ImageNet head on shifted sets: IN-A/R/Sketch/v2/ReaL, IN-C mCE, backgrounds, occlusion"),
)
