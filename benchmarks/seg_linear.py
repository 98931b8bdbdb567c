"""Linear semantic segmentation on a frozen backbone (CrIBo Table 2), through mmseg.

Head: Segmenter's linear decoder as mmseg configures it (``segmenter_vit-s_fcn``): an
FCNHead with ``num_convs=0, concat_input=False`` -- a 1x1 convolution from the final-normed
last-layer patch tokens to the classes, bilinear upsampling, pixel cross-entropy
(ignore 255). The backbone is frozen: no gradients, its weights bit-identical after
training (tested). Its mode while the head trains is a setting, ``frozen_backbone_mode``:
"train" (the ``paper`` preset) is CrIBo's behaviour -- its FreezableVisionTransformer is put
in eval mode once, and mmengine's ``model.train()`` turns the backbone's DropPath (rate 0.1
in its model config) back on, so the head learns from stochastic-depth features; "eval"
gives deterministic features. Everything else -- data, schedule, sweep, records -- is in
benchmarks/seg_common.py; docs/PROTOCOLS.md (segmentation section) lists the sources and
differences.

    ssl-bench eval --protocol seg_linear --dataset ade20k --data-root DIR --checkpoint CKPT
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Literal

from benchmarks.seg_common import PRETRAIN_MEAN_255, PRETRAIN_STD_255, SegConfig, SegProtocolBase
from harness.protocol import Protocol
from harness.registry import register_protocol

# CrIBo's linear-segmentation learning-rate sweep, from the paper's text (the official code
# runs one lr per launch, default 0.01); best mIoU reported.
LINEAR_LRS = [8e-4, 3e-4, 1e-4, 8e-5]


@dataclass
class SegLinearConfig(SegConfig):
    PAPER_LRS: ClassVar[tuple[float, ...]] = tuple(LINEAR_LRS)

    # CrIBo's segmenter_vit-b16_mask.py model config, which its fcn configs inherit
    drop_path_rate: float = 0.1
    # train: the frozen backbone follows model.train() (CrIBo: DropPath on while the head
    # trains); eval: it stays in eval mode (deterministic features, drop path unused)
    frozen_backbone_mode: Literal["train", "eval"] = "train"


@register_protocol("seg_linear")
class SegLinear(SegProtocolBase, Protocol):
    Config = SegLinearConfig
    HEAD = "linear"
    FROZEN = True
    PRESETS = {
        # CrIBo Table 2 as its official code runs it: crop 512, batch 4, DropPath 0.1 on in the
        # frozen backbone, validation every iters/10; schedule (long) and lr sweep (the paper's)
        # are the config defaults, left out here so that --set iters / --lr replace them.
        "paper": {"crop_size": 512, "batch_size": 4, "drop_path_rate": 0.1, "frozen_backbone_mode": "train",
                  "val_interval": None},
        # CPU check on SynthScenes (64 px images, vit_cpu_tiny): about a minute on 2 cores. The
        # pretraining normalisation and 600 iterations of 16 at lr 0.01: with CrIBo's 127.5 and
        # 300 x 8 at 3e-3, a pretrained tiny ViT scored below random init (docs/BENCHMARKS.md).
        # It keeps its deterministic frozen features and one evaluation, at the end.
        "synth": {"crop_size": 64, "iters": 600, "lrs": [1e-2], "batch_size": 16, "num_workers": 0,
                  "mean": PRETRAIN_MEAN_255, "std": PRETRAIN_STD_255, "log_interval": 100,
                  "drop_path_rate": 0.0, "frozen_backbone_mode": "eval", "val_interval": 0},
    }
    DEFAULT_PRESET = "paper"
