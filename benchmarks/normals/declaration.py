"""Probe3D's surface-normal probe: its declaration (harness.declaration)."""
from harness.declaration import ProtocolDeclaration
from harness.metrics import Metric

_KIND = ("means",)

DECLARATIONS = (
    ProtocolDeclaration(
        name="normals_dpt", module="benchmarks.normals.protocol",
        metrics=(Metric("angular_rmse", unit="°", direction="lower", per_image=_KIND, label="RMSE°"),
                 Metric("within_11_25", unit="%", direction="higher", per_image=_KIND, label="<11.25°"),
                 Metric("within_22_5", unit="%", direction="higher", per_image=_KIND, label="<22.5°"),
                 Metric("within_30", unit="%", direction="higher", per_image=_KIND, label="<30°"),
                 Metric("mean_angle", unit="°", direction="lower", per_image=_KIND, label="mean°"),
                 Metric("median_angle", unit="°", direction="lower", per_image=_KIND, label="median°")),
        headline="angular_rmse",
        datasets={"nyu_probe3d": "harness.data.nyu_probe3d", "navi_probe3d": "harness.data.navi_probe3d"},
        synthetic="harness.data.synthetic_probe3d",
        summary="surface normals from four frozen blocks with Probe3D's DPT probe (NYU, angular error)"),
)
