"""Catalogue entries (harness.data.catalogue): the box layouts LOST reads. Torch-free."""
from harness.data.catalogue import ExtraLayout, Layout, Split

CATALOGUE = (
    ExtraLayout("voc2007", Layout("boxes", "voc07", "VOC2007/{JPEGImages,Annotations,ImageSets/Main}",
                                  docs="docs/protocols/lost.md, Data",
                                  splits=(Split("trainval", 5_011, classes=20),))),
    ExtraLayout("voc", Layout("boxes", "voc12", "VOC2012/{JPEGImages,Annotations,ImageSets/Main}",
                              docs="docs/protocols/lost.md, Data",
                              splits=(Split("trainval", 11_540, classes=20),))),
    ExtraLayout("coco", Layout("coco20k", "coco20k", "train2014/ + annotations/instances_train2014.json, "
                               "restricted to LOST's list", docs="docs/protocols/lost.md, Data",
                               splits=(Split("train", 19_817, classes=80),))),
)
