"""End-to-end fine-tuning (``finetune``): the settings live in benchmarks.finetune.config."""
from __future__ import annotations

from benchmarks.finetune.config import EXECUTION_SETTINGS, FinetuneConfig, per_device_batch

__all__ = ["EXECUTION_SETTINGS", "FinetuneConfig", "per_device_batch"]
