"""What mmengine's checkpoints hold besides tensors, allowed for torch's weights-only unpickler
while a run resumes, and nothing more.

mmengine 0.10.7 calls ``torch.load`` without ``weights_only``; torch >= 2.6 then refuses its
checkpoints (message-hub history buffers holding numpy arrays and scalars, and their statistics
methods). Allowing exactly these, scoped to the runs (:func:`mmengine_checkpoint_loading`), keeps
weights-only loading on.
"""
from __future__ import annotations

import contextlib
import pickle

import torch


def history_buffer_getattr(obj, name: str):
    """``getattr`` as mmengine's checkpoints need it, and nothing more.

    ``HistoryBuffer.__getstate__`` pickles its statistics methods, which pickle writes as
    ``getattr(HistoryBuffer, "min")`` etc. Allow-listing the real ``builtins.getattr`` would
    let a checkpoint fetch any attribute of any object it can build; this one only hands
    out HistoryBuffer's registered statistics methods.
    """
    from mmengine.logging.history_buffer import HistoryBuffer

    allowed = {"min", "max", "current", "mean", *HistoryBuffer._statistics_methods}
    if obj is HistoryBuffer and isinstance(name, str) and name in allowed:
        return getattr(HistoryBuffer, name)
    raise pickle.UnpicklingError(
        f"getattr({obj!r}, {name!r}) is not allowed when loading an mmengine checkpoint")


def weights_only_globals() -> list:
    """The globals an mmengine checkpoint names: its history buffers, numpy arrays, dtypes and
    scalars (under numpy 2's and numpy 1's module names), and the scoped ``getattr``."""
    import numpy as np
    from mmengine.logging.history_buffer import HistoryBuffer

    try:
        from numpy._core import multiarray as ma
    except ImportError:  # numpy < 2
        from numpy.core import multiarray as ma
    allowed: list = [HistoryBuffer, np.ndarray, np.dtype, ma._reconstruct, ma.scalar]
    # numpy >= 1.25 rebuilds a dtype through its class (numpy.dtypes.Float64DType, ...)
    allowed += sorted({type(np.dtype(t)) for t in ("float64", "float32", "float16", "int64", "int32",
                                                   "int16", "int8", "uint8", "bool")}, key=str)
    # checkpoints written under numpy 1.x name these numpy.core.multiarray.*
    allowed += [(ma._reconstruct, "numpy.core.multiarray._reconstruct"),
                (ma.scalar, "numpy.core.multiarray.scalar")]
    allowed += [(history_buffer_getattr, "builtins.getattr"),
                (history_buffer_getattr, "__builtin__.getattr")]
    return allowed


@contextlib.contextmanager
def mmengine_checkpoint_loading():
    """Scoped allow-list for torch's weights-only loading of mmengine checkpoints."""
    with torch.serialization.safe_globals(weights_only_globals()):
        yield
