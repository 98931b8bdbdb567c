"""What both retrieval protocols share: settings checks, folders relative to the data root,
the model's patch size and the extraction keywords."""
from __future__ import annotations

from pathlib import Path

import torch

from harness.errors import ConfigError
from harness.models.handle import ModelHandle
from harness.runtime.device import resolve_device


def under_root(data_root: Path, folder: str | None) -> Path | None:
    """A setting's folder: absolute as given, else relative to the data root."""
    if folder is None:
        return None
    p = Path(folder).expanduser()
    return p if p.is_absolute() else Path(data_root) / p


def patch_size(model: ModelHandle, imsize: int, what: str) -> int:
    """The model's patch size (stride), checked against the image size before any work."""
    p = int(model.backbone.patch_size)
    if imsize < p:
        raise ConfigError(f"{what}: imsize {imsize} is smaller than the model's patch size {p}; "
                          f"choose imsize >= {p}")
    return p


def search_device(model: ModelHandle, setting: str) -> torch.device:
    return model.device if setting == "auto" else resolve_device(setting)


def extract_kwargs(cfg) -> dict:
    return dict(batch_size=cfg.batch_size, num_workers=cfg.num_workers, progress=cfg.progress,
                precision=cfg.precision, threads=cfg.threads)
