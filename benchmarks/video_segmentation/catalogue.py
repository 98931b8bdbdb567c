"""Catalogue entry (harness.data.catalogue) of DAVIS-2017. Torch-free."""
from harness.data.catalogue import DataSet, Layout, Split

CATALOGUE = (
    DataSet(
        key="davis2017", title="DAVIS-2017 semi-supervised (480p)",
        source="davischallenge.org/davis2017/code.html: DAVIS-2017-trainval-480p.zip",
        docs="docs/DATASETS.md, Reader API, Video; docs/protocols/video_segmentation.md",
        layouts=(Layout("480p", "davis2017",
                         "ImageSets/2017/<split>.txt, JPEGImages/480p/<seq>/, Annotations/480p/<seq>/", height=480),),
        splits=(Split("train", 60, "sequences"), Split("val", 30, "sequences"))),
)
