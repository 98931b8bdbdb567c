"""The unsupervised-classification protocol's declaration (harness.declaration), torch-free."""
from harness.declaration import ProtocolDeclaration
from harness.metrics import Metric

_KIND = "clusters"

DECLARATIONS = (
    ProtocolDeclaration(
        name="unsup_cls", module="benchmarks.unsup_cls.protocol",
        metrics=(Metric("ACC", unit="%", per_image=_KIND, label="ACC"),
                 Metric("ARI", unit="%", per_image=_KIND, label="ARI"),
                 Metric("NMI", unit="%", per_image=_KIND, label="NMI"),
                 Metric("FMI", unit="%", per_image=_KIND, label="FMI")),
        headline="ACC", variant_labels={"assignment": "{}"},
        per_image_kinds={_KIND: "benchmarks.unsup_cls.per_image_kind"},
        reads=("imagenet", "imagefolder", "synth_background"),
        summary="unsupervised classification (iBOT unsup_cls.py): head argmax and k-means, ACC/ARI/NMI/FMI"),
)
