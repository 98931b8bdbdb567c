"""Linear semantic segmentation on a frozen backbone (CrIBo Table 2), through mmseg.

Head: Segmenter's linear decoder as mmseg configures it (``segmenter_vit-s_fcn``): an
FCNHead with ``num_convs=0, concat_input=False`` -- a 1x1 convolution from the final-normed
last-layer patch tokens to the classes, bilinear upsampling, pixel cross-entropy
(ignore 255). The backbone is frozen: no gradients, its weights bit-identical after
training (tested). Its mode while the head trains is a setting, ``frozen_backbone_mode``:
"train" (the ``paper`` preset) is CrIBo's behaviour -- its FreezableVisionTransformer is put
in eval mode once, and mmengine's ``model.train()`` turns the backbone's DropPath (rate 0.1
in its model config) back on, so the head learns from stochastic-depth features; "eval"
gives deterministic features. Everything else -- data, schedule, sweep, records -- is shared
with segmenter.py in this folder: config.py (settings), seg_protocol.py (records, protocol base),
mmseg_config.py and sweep.py (mmseg config and run); README.md lists the
sources and differences.

    ssl-bench eval --protocol seg_linear --dataset ade20k --data-root DIR --checkpoint CKPT
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar, Literal

from benchmarks.segmentation.config import SegConfig
from benchmarks.segmentation.seg_protocol import SegProtocolBase
from harness.presets import load_presets
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
    PRESETS = load_presets("seg_linear", Path(__file__).parent / "presets")
    DEFAULT_PRESET = "paper"
