"""Catalogue entries (harness.data.catalogue): Probe3D's layouts of NYU and NAVI. Torch-free."""
from harness.data.catalogue import ExtraLayout, Layout, Split

CATALOGUE = (
    ExtraLayout("nyu", Layout(
        "probe3d", "nyu_probe3d",
        "nyuv2_geonet/*.mat (GeoNet export, train) + nyuv2/nyuv2_snorm_all.pkl (labelled frames)",
        docs="docs/protocols/probe3d.md, Data", prepare="harness.data.prepare_nyu_probe3d",
        splits=(Split("test", 654, note="test_indices of the 1,449 labelled frames"),))),
    ExtraLayout("navi", Layout(
        "probe3d", "navi_probe3d", "root/<object>/<collection>/ with annotations.json, images/, depth/ (downsampled)",
        docs="docs/protocols/probe3d.md, NAVI",
        splits=(Split("trainval", None), Split("test", None, note="every wild_set frame, every 4th")))),
)
