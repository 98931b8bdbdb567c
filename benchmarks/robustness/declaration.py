"""Robustness of the linear head: its declaration (harness.declaration), torch-free."""
from harness.declaration import ProtocolDeclaration
from harness.metrics import Metric

DECLARATIONS = (
    ProtocolDeclaration(
        name="robustness", module="benchmarks.robustness.protocol",
        metrics=(Metric("top1", unit="%", per_image="hits", label="top-1"),
                 Metric("mCE", unit="%", direction="lower", per_image="means", label="mCE")),
        headline="top1", variant_labels={"shift": "{}"},
        datasets={"imagenet_v2": "benchmarks.robustness.readers",
                  "imagenet_c": "benchmarks.robustness.readers",
                  "backgrounds_challenge": "benchmarks.robustness.readers"},
        synthetic="benchmarks.robustness.synthetic",
        reads=("imagenet", "imagefolder"),
        summary="a linear ImageNet head on shifted sets: IN-A/R/Sketch/v2/ReaL, IN-C mCE, backgrounds, occlusion"),
)
