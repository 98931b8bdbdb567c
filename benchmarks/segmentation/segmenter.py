"""End-to-end Segmenter finetuning (CrIBo Table 3), through mmseg.

Head: mmseg's ``SegmenterMaskTransformerHead`` as in its Segmenter configs -- 2 transformer
layers, heads = the backbone's, MLP ratio 4, drop path 0.1, learnable class embeddings,
L2-normalised patch / class projections, mask norm. The backbone trains too (drop path
0.1, as mmseg's Segmenter model config). Adam, PolyLR to 0.1 x lr, batch 4, validation every
iters/10 (the last one reported); schedule ``long`` (160k / 80k; ``short``: CrIBo's 40k / 20k
configs) and lr sweep {8e-5, 3e-5, 1e-5, 8e-6} from the paper's text (``lr_sweep:
launcher_default``: CrIBo's launcher default 0.01), best mIoU reported and every lr kept as
its own record. Shared machinery in this folder: config.py (settings), seg_protocol.py (records,
protocol base), mmseg_config.py and sweep.py (mmseg config and run); sources and differences in
README.md.

    ssl-bench eval --protocol segmenter --dataset ade20k --data-root DIR --checkpoint CKPT
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from benchmarks.segmentation.config import SegConfig
from benchmarks.segmentation.seg_protocol import SegProtocolBase
from harness.presets import load_presets
from harness.protocol import Protocol
from harness.registry import register_protocol

# From the paper's text (the official code runs one lr per launch, default 0.01).
SEGMENTER_LRS = [8e-5, 3e-5, 1e-5, 8e-6]


@dataclass
class SegmenterConfig(SegConfig):
    PAPER_LRS: ClassVar[tuple[float, ...]] = tuple(SEGMENTER_LRS)

    drop_path_rate: float = 0.1  # backbone, mmseg's segmenter_vit-b16_mask.py


@register_protocol("segmenter")
class Segmenter(SegProtocolBase, Protocol):
    Config = SegmenterConfig
    HEAD = "mask"
    FROZEN = False
    PRESETS = load_presets("segmenter", Path(__file__).parent / "presets")
    DEFAULT_PRESET = "paper"
