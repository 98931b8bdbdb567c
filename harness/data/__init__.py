"""Dataset readers and the SynthScenes generator.

Importing this package registers the readers with ``harness.registry.DATASETS``
("voc"/"voc12aug", "ade20k", "imagefolder"/"imagenet", "captions"), and the data sets only
the mmseg protocols read ("pascal_context", "pascal_context_59", "coco_stuff164k"), and the
fine-tuning transfer sets in their official files ("cifar10", "cifar100", "inat2018", "inat2019",
"flowers102", "cars_annos"), and ImageNet's shifted sets ("imagenet_v2", "imagenet_c",
"backgrounds_challenge").
"""
from harness.data.captions import CaptionGroups, Group
from harness.data import cifar, flowers102, imagenet_shifts, inaturalist, stanford_cars  # noqa: F401 (registers them)
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
