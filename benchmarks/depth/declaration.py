"""Monocular depth: the declarations (harness.declaration) of the linear probe (``depth_linear``) and
Probe3D's DPT probe (``depth_dpt``)."""
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
        datasets={"nyu": "harness.data.nyu", "kitti": "harness.data.kitti"},
        synthetic="benchmarks.depth.synthetic",
        summary="monocular depth from frozen patch features: a linear 256-bin head (DINOv3 NYU recipe; DINOv2 linear4; "
                "KITTI Eigen)"),
    ProtocolDeclaration(
        name="depth_dpt", module="benchmarks.depth.protocol_dpt",
        metrics=(Metric("rmse", unit="m", direction="lower", per_image=_KIND, label="RMSE"),
                 Metric("delta1", unit="%", direction="higher", per_image=_KIND, label="δ<1.25"),
                 Metric("delta2", unit="%", direction="higher", per_image=_KIND, label="δ<1.25²"),
                 Metric("delta3", unit="%", direction="higher", per_image=_KIND, label="δ<1.25³")),
        headline="rmse",
        datasets={"nyu_probe3d": "harness.data.nyu_probe3d", "navi_probe3d": "harness.data.navi_probe3d"},
        synthetic="harness.data.synthetic_probe3d",
        summary="binned depth from four frozen blocks with Probe3D's DPT probe (NYU)"),
)
