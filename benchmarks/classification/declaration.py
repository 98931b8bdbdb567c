"""The classification protocols' declarations (harness.declaration): read by the tables without
importing torch; the modules named here register the classes."""
from harness.declaration import ProtocolDeclaration
from harness.metrics import Metric

_ACCURACY = (Metric("top1", unit="%", per_image="hits", label="top-1"),
             Metric("top5", unit="%", per_image="hits", label="top-5"))

DECLARATIONS = (
    ProtocolDeclaration(
        name="knn", module="benchmarks.classification.knn", metrics=_ACCURACY, headline="top1",
        variant_labels={"k": "k={}", "feature": "{}"},
        reads=("imagenet", "imagefolder", "synth_background"),
        summary="DINO's weighted k-NN on frozen features"),
    ProtocolDeclaration(
        name="linear", module="benchmarks.classification.linear_probe", metrics=_ACCURACY, headline="top1",
        variant_labels={"recipe": "{}", "cached_features": "cached features", "selection": "[{}]"},
        variant_defaults={"selection": "eval-split best"},  # selection.EVAL_BEST: the papers' rule
        reads=("imagenet", "imagefolder", "synth_background"),
        summary="linear probe on frozen features (DINO, iBOT, SynCLR recipes)"),
)
