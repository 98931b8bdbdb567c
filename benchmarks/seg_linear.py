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
from benchmarks.seg_common import SegConfig, SegProtocolBase
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
        # CPU check on SynthScenes (64 px images, vit_cpu_tiny): minutes on 2 cores.
        "synth": {"crop_size": 64, "iters": 300, "lrs": [3e-3], "batch_size": 8, "num_workers": 0,
                  "log_interval": 50},
    }
    DEFAULT_PRESET = "paper"
