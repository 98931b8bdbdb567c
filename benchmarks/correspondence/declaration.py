"""Zero-shot keypoint correspondence: its declaration (harness.declaration), torch-free."""
from harness.declaration import ProtocolDeclaration
from harness.metrics import Metric

_KIND = "category_pck"

DECLARATIONS = (
    ProtocolDeclaration(
        name="correspondence", module="benchmarks.correspondence.protocol",
        metrics=(Metric("PCK", unit="%", direction="higher", per_image=_KIND, label="PCK@0.1"),
                 Metric("PCK_vp0", unit="%", direction="higher", per_image=_KIND, label="PCK vp small"),
                 Metric("PCK_vp1", unit="%", direction="higher", per_image=_KIND, label="PCK vp medium"),
                 Metric("PCK_vp2", unit="%", direction="higher", per_image=_KIND, label="PCK vp large")),
        headline="PCK",
        datasets={"spair71k": "benchmarks.correspondence.reader"},
        per_image_kinds={_KIND: "benchmarks.correspondence.per_image_kind"},
        synthetic="benchmarks.correspondence.synthetic",
        summary="zero-shot keypoint matching of frozen patch features, SPair-71k PCK@0.1 by viewpoint (Probe3D)"),
)
