"""Monocular depth, linear probe: its declaration (harness.declaration)."""
from harness.declaration import ProtocolDeclaration
from harness.metrics import Metric

_KIND = ("means",)

DECLARATIONS = (
    ProtocolDeclaration(
        name="depth_linear", module="benchmarks.depth.protocol",
        metrics=(Metric("RMSE", unit="m", direction="lower", per_image=_KIND),
                 Metric("AbsRel", unit="", direction="lower", per_image=_KIND, label="AbsRel"),
                 Metric("log_RMSE", unit="", direction="lower", per_image=_KIND, label="log RMSE"),
                 Metric("delta1", unit="", direction="higher", per_image=_KIND, label="δ<1.25"),
                 Metric("delta2", unit="", direction="higher", per_image=_KIND, label="δ<1.25²"),
                 Metric("delta3", unit="", direction="higher", per_image=_KIND, label="δ<1.25³")),
        headline="RMSE",
        datasets={"nyu": "benchmarks.depth.reader", "kitti": "benchmarks.depth.reader_kitti"},
        synthetic="benchmarks.depth.synthetic",
        summary="monocular depth from frozen patch features: a linear 256-bin head (DINOv3 NYU recipe; DINOv2 linear4; "
                "KITTI Eigen)"),
)
