"""Probe3D's dense probes: their declarations (harness.declaration)."""
from harness.declaration import ProtocolDeclaration
from harness.metrics import Metric

_KIND = ("means",)
_DATA = {"nyu_probe3d": "benchmarks.probe3d.reader", "navi_probe3d": "benchmarks.probe3d.reader_navi"}

DECLARATIONS = (
    ProtocolDeclaration(
        name="normals_dpt", module="benchmarks.probe3d.protocol",
        metrics=(Metric("angular_rmse", unit="°", direction="lower", per_image=_KIND, label="RMSE°"),
                 Metric("within_11_25", unit="%", direction="higher", per_image=_KIND, label="<11.25°"),
                 Metric("within_22_5", unit="%", direction="higher", per_image=_KIND, label="<22.5°"),
                 Metric("within_30", unit="%", direction="higher", per_image=_KIND, label="<30°"),
                 Metric("mean_angle", unit="°", direction="lower", per_image=_KIND, label="mean°"),
                 Metric("median_angle", unit="°", direction="lower", per_image=_KIND, label="median°")),
        headline="angular_rmse", datasets=_DATA, synthetic="benchmarks.probe3d.synthetic",
        summary="surface normals from four frozen blocks with Probe3D's DPT probe (NYU, angular error)"),
    ProtocolDeclaration(
        name="depth_dpt", module="benchmarks.probe3d.protocol",
        metrics=(Metric("rmse", unit="m", direction="lower", per_image=_KIND, label="RMSE"),
                 Metric("delta1", unit="%", direction="higher", per_image=_KIND, label="δ<1.25"),
                 Metric("delta2", unit="%", direction="higher", per_image=_KIND, label="δ<1.25²"),
                 Metric("delta3", unit="%", direction="higher", per_image=_KIND, label="δ<1.25³")),
        headline="rmse", datasets=_DATA, synthetic="benchmarks.probe3d.synthetic",
        summary="binned depth from four frozen blocks with Probe3D's DPT probe (NYU)"),
)
