"""mmengine's launcher of a run and the number of processes it trains on (the global batch is
split over them)."""
from __future__ import annotations

import os


def resolve_launcher(launcher: str) -> str:
    """``auto``: ``pytorch`` under a multi-process launch (WORLD_SIZE > 1), else ``none``."""
    if launcher != "auto":
        return launcher
    return "pytorch" if int(os.environ.get("WORLD_SIZE", "1")) > 1 else "none"


def world_size(launcher: str) -> int:
    if launcher == "slurm":
        return int(os.environ.get("SLURM_NTASKS", "1"))
    return int(os.environ.get("WORLD_SIZE", "1")) if launcher != "none" else 1
