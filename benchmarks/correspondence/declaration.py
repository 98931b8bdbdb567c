"""Zero-shot correspondence: its declarations (harness.declaration), torch-free: SPair-71k keypoints
(``correspondence``) and NAVI multiview points (``correspondence_navi``), whose metrics differ."""
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
        datasets={"spair71k": "harness.data.spair71k"},
        per_image_kinds={_KIND: "benchmarks.correspondence.per_image_kind"},
        synthetic="benchmarks.correspondence.synthetic",
        summary="zero-shot keypoint matching of frozen patch features, SPair-71k PCK@0.1 by viewpoint (Probe3D)"),
    ProtocolDeclaration(
        name="correspondence_navi", module="benchmarks.correspondence.protocol_navi",
        metrics=tuple(Metric(name, unit="%", direction="higher", per_image="ratios", label=label) for name, label in (
            ("recall_2cm", "recall@2cm"), ("recall_1cm", "recall@1cm"), ("recall_5cm", "recall@5cm"),
            ("recall_5px", "recall@5px"), ("recall_25px", "recall@25px"), ("recall_50px", "recall@50px"),
            ("recall_2cm_0_30", "recall@2cm 0-30°"), ("recall_2cm_30_60", "recall@2cm 30-60°"),
            ("recall_2cm_60_90", "recall@2cm 60-90°"), ("recall_2cm_90_120", "recall@2cm 90-120°"))),
        headline="recall_2cm",
        datasets={"navi": "harness.data.navi_pairs"},
        synthetic="benchmarks.correspondence.synthetic_navi",
        summary="zero-shot multiview matching of frozen patch features, NAVI recall at 1/2/5 cm and 5/25/50 px, "
                "2 cm by relative rotation (Probe3D)"),
)
