"""Nearest-neighbour retrieval's declarations (harness.declaration): revisited Oxford / Paris
image retrieval and Copydays copy detection."""
from harness.declaration import ProtocolDeclaration
from harness.metrics import Metric

_READERS = "harness.data.revisited"

DECLARATIONS = (
    ProtocolDeclaration(
        name="image_retrieval", module="benchmarks.retrieval.image_retrieval",
        metrics=(Metric("mAP_M", unit="%", direction="higher", per_image=("means",), label="mAP M"),
                 Metric("mAP_H", unit="%", direction="higher", per_image=("means",), label="mAP H"),
                 Metric("mAP_E", unit="%", direction="higher", per_image=("means",), label="mAP E")),
        headline="mAP_M", variant_labels={"multiscale": "ms={}", "imsize": "{}px"},
        datasets={"roxford5k": _READERS, "rparis6k": _READERS},
        synthetic="benchmarks.retrieval.synthetic",
        summary="revisited Oxford / Paris retrieval with frozen [CLS] features, mAP E/M/H (DINO, iBOT Table 16)"),
    ProtocolDeclaration(
        name="copy_detection", module="benchmarks.retrieval.copy_detection",
        metrics=(Metric("mAP_strong", unit="%", direction="higher", per_image=("means",), label="mAP strong"),),
        headline="mAP_strong", variant_labels={"imsize": "{}px"},
        datasets={"copydays": "harness.data.copydays"},
        synthetic="benchmarks.retrieval.synthetic",
        summary="Copydays copy detection, [CLS] + GeM features whitened, mAP on strong (DINO)"),
)
