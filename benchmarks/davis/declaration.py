"""Video object segmentation by label propagation's declaration (harness.declaration)."""
from harness.declaration import ProtocolDeclaration
from harness.metrics import Metric

_RATIOS = ("ratios",)
DECLARATIONS = (
    ProtocolDeclaration(
        name="davis", module="benchmarks.davis.protocol",
        metrics=(Metric("JF_mean", per_image=_RATIOS, label="(J&F)m"),
                 Metric("J_mean", per_image=_RATIOS, label="Jm"),
                 Metric("F_mean", per_image=_RATIOS, label="Fm"),
                 Metric("J_recall", per_image=_RATIOS, label="Jr"),
                 Metric("F_recall", per_image=_RATIOS, label="Fr"),
                 Metric("J_decay", direction="lower", per_image=_RATIOS, label="Jd"),
                 Metric("F_decay", direction="lower", per_image=_RATIOS, label="Fd")),
        headline="JF_mean",
        reads=("davis2017",),
        synthetic="benchmarks.davis.synthetic",
        summary="video object segmentation by label propagation of the first frame's mask (DAVIS-2017, J and F)"),
)
