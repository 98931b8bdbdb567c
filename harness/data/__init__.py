"""Dataset readers and the SynthScenes generator.

Importing this package registers the readers with ``harness.registry.DATASETS``
("voc"/"voc12aug", "ade20k", "imagefolder"/"imagenet", "captions"), and the data sets only
the mmseg protocols read ("pascal_context", "pascal_context_59", "coco_stuff164k"), and the
fine-tuning transfer sets in their official files ("cifar10", "cifar100", "inat2018", "inat2019",
"flowers102", "cars_annos"), the box readers ("voc07", "voc12", "coco20k"), DAVIS-2017 ("davis2017"),
the linear-transfer sets in their published layouts ("dtd", "pets", "flowers", "aircraft",
"caltech101", "voc2007", "food", "sun397", "cars", "eurosat", "resisc45", "kitti_distance",
"country211", "gtsrb", "mnist"), ImageNet's shifted sets ("imagenet_v2", "imagenet_c",
"backgrounds_challenge") and COCO's instances ("coco_instances").
"""
from harness.data.captions import CaptionGroups, Group
from harness.data import (  # noqa: F401 (registers them)
    caltech101, cifar, coco20k, coco_instances, davis, dtd, fgvc_aircraft, flowers102, folder_splits, food101,
    gtsrb, imagenet_shifts, inaturalist, mnist, oxford_pets, stanford_cars, sun397, voc2007, voc_boxes,
)
from harness.data.classification import ImageFolderDataset
from harness.data.io import load_label_png, load_rgb
from harness.data.segmentation import ADE20KSegmentation, SegmentationDataset, VOCSegmentation
from harness.data.synthetic import (
    PRESETS, SynthPreset, default_root, generate, load_meta, pretrain_image_paths,
)

__all__ = [
    "ADE20KSegmentation", "CaptionGroups", "Group", "ImageFolderDataset", "PRESETS",
    "SegmentationDataset", "SynthPreset", "VOCSegmentation", "default_root", "generate",
    "load_label_png", "load_meta", "load_rgb", "pretrain_image_paths",
]
