"""The logistic-regression protocol's declaration (harness.declaration), torch-free."""
from harness.declaration import ProtocolDeclaration
from harness.metrics import Metric

DECLARATIONS = (
    ProtocolDeclaration(
        name="logreg", module="benchmarks.logreg.protocol",
        metrics=(Metric("top1", unit="%", per_image="hits", label="top-1"),),
        headline="top1", variant_labels={"lambda": "lambda={}", "selection": "[{}]", "feature": "{}"},
        reads=("imagenet", "imagefolder", "synth_background"),
        summary="iBOT's cyanure logistic regression on frozen features, lambda sweep"),
)
