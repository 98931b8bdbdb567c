"""``resume.pt``: everything a fine-tuning run needs to go on as if it had never stopped.

Model, optimizer, gradient scaler, EMA, the optimisation step reached, the history of the
evaluations so far, the training loss summed since the last one, the generators every random
choice draws from (torch's: drop path and random erasing outside the per-sample seeds; numpy's:
mixup / cutmix; python's), and the recipe's identity:
the fingerprint of the settings that change the trajectory with the model's weights key and the
data's stamp. A file of another recipe, model or data set is refused in one line.
"""
from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import numpy as np
import torch

from harness.errors import ConfigError
from harness.io_utils import atomic_write


def rng_state() -> dict[str, Any]:
    np_state = np.random.get_state()
    state = {"torch": torch.get_rng_state(), "python": repr(random.getstate()),
             "numpy_keys": torch.from_numpy(np_state[1].astype(np.int64)),
             "numpy_meta": [str(np_state[0]), int(np_state[2]), int(np_state[3]), float(np_state[4])]}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    import ast

    torch.set_rng_state(state["torch"])
    random.setstate(_as_tuple(ast.literal_eval(state["python"])))
    name, pos, has_gauss, gauss = state["numpy_meta"]
    np.random.set_state((name, state["numpy_keys"].numpy().astype(np.uint32), int(pos), int(has_gauss), float(gauss)))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state(state["cuda"])


def _as_tuple(value):
    return tuple(_as_tuple(v) for v in value) if isinstance(value, (list, tuple)) else value


def save(path: Path, *, identity: str, model, optimizer, scaler, ema, step: int, history: list[dict],
         trained_on: list[dict], train_loss: tuple[float, int] = (0.0, 0)) -> None:
    state = {"identity": identity, "model": model.state_dict(), "optimizer": optimizer.state_dict(),
             "scaler": scaler.state_dict(), "step": int(step), "history": repr(history),
             "trained_on": repr(trained_on), "train_loss": repr(tuple(train_loss)), "rng": rng_state()}
    if ema is not None:
        state["ema"] = ema.module.state_dict()
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, lambda p: torch.save(state, p))


def load(path: Path, identity: str) -> dict[str, Any]:
    """The state in ``path`` (weights only: tensors, numbers, strings); a ConfigError when it
    cannot be read or was written by another recipe, model or data set."""
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # a truncated or foreign file: torch raises several types
        why = (str(exc).splitlines() or [""])[0][:120]
        raise ConfigError(f"finetune: {path} cannot be read as a resume file ({type(exc).__name__}: {why}); "
                          f"delete it to start over") from exc
    if not isinstance(state, dict) or "identity" not in state:
        raise ConfigError(f"finetune: {path} is not a finetune resume file; delete it or name another")
    if state["identity"] != identity:
        raise ConfigError(f"finetune: {path} was written by another recipe, model or data set "
                          f"(identity {state['identity'][:12]}, this run {identity[:12]}); delete it to start "
                          f"over, or resume with the settings that wrote it")
    import ast

    state["history"] = ast.literal_eval(state["history"])
    state["trained_on"] = ast.literal_eval(state["trained_on"])
    state["train_loss"] = ast.literal_eval(state.get("train_loss", "(0.0, 0)"))
    return state
