"""Linear semantic segmentation on a frozen backbone (CrIBo Table 2), through mmseg.

Head: Segmenter's linear decoder as mmseg configures it (``segmenter_vit-s_fcn``): an
FCNHead with ``num_convs=0, concat_input=False`` -- a 1x1 convolution from the final-normed
last-layer patch tokens to the classes, bilinear upsampling, pixel cross-entropy
(ignore 255). The backbone is frozen in the strict sense: no gradients, and eval mode for
the whole run (CrIBo's FreezableVisionTransformer leaves DropPath active); its weights are
bit-identical after training (tested). Everything else -- data, schedule, sweep, records --
is in benchmarks/seg_common.py; docs/PROTOCOLS.md (segmentation section) lists the sources and differences.

    ssl-bench eval --protocol seg_linear --dataset ade20k --data-root DIR --checkpoint CKPT
"""
from __future__ import annotations

from dataclasses import dataclass, field

from benchmarks.base import Protocol
from benchmarks.seg_common import PRETRAIN_MEAN_255, PRETRAIN_STD_255, SegConfig, SegProtocolBase
from harness.registry import register_protocol

# CrIBo's linear-segmentation learning-rate sweep (best mIoU reported).
LINEAR_LRS = [8e-4, 3e-4, 1e-4, 8e-5]


@dataclass
class SegLinearConfig(SegConfig):
    lrs: list[float] = field(default_factory=lambda: list(LINEAR_LRS))


@register_protocol("seg_linear")
class SegLinear(SegProtocolBase, Protocol):
    Config = SegLinearConfig
    HEAD = "linear"
    FROZEN = True
    PRESETS = {
        # CrIBo Table 2: crop 512, the dataset's paper schedule (None), lr sweep, batch 8.
        "paper": {"crop_size": 512, "iters": None, "lrs": list(LINEAR_LRS), "batch_size": 8},
        # CPU check on SynthScenes (64 px images, vit_cpu_tiny): about a minute on 2 cores. The
        # pretraining normalisation and 600 iterations of 16 at lr 0.01: with CrIBo's 127.5 and
        # 300 x 8 at 3e-3, a pretrained tiny ViT scored below random init (docs/BENCHMARKS.md).
        "synth": {"crop_size": 64, "iters": 600, "lrs": [1e-2], "batch_size": 16, "num_workers": 0,
                  "mean": PRETRAIN_MEAN_255, "std": PRETRAIN_STD_255, "log_interval": 100},
    }
    DEFAULT_PRESET = "paper"
