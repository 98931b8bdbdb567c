"""The mm* stack the detection protocol runs on: mmdet 3.3.0 on mmcv 2.1 with compiled ops.

Nothing here imports mmcv / mmdet at module level: the rest of the harness never imports them,
and a missing install is one :class:`MissingDependencyError` line naming the install command.
mmcv's RoIAlign and NMS run in its compiled extension: an extension built without CUDA cannot
run them on GPU tensors (mmcv raises deep inside the first iteration), so a GPU run with such
ops is refused before anything starts (:func:`check_ops_for_device`).
"""
from __future__ import annotations

from harness.errors import ConfigError, MissingDependencyError

MMDET_VERSION = "3.3.0"
MMCV_SERIES = "2.1."
INSTALL_COMMAND = "bash scripts/install_mmcv.sh"
NO_CUDA = "not available"  # mmcv.ops.get_compiling_cuda_version() of a CPU-only build


def require_mmdet() -> None:
    """Import the mmdet stack, or raise MissingDependencyError saying how to install it."""
    try:
        import mmdet  # first: a missing mmdet is found before mmcv's ops load
        import mmcv
        import mmcv.ops  # noqa: F401  (the compiled extension)
        import mmdet.models  # noqa: F401
        import pycocotools.cocoeval  # noqa: F401
    except (ImportError, OSError) as exc:
        raise MissingDependencyError(
            f"the detection protocol needs mmdet {MMDET_VERSION}, pycocotools and mmcv 2.1 with compiled ops "
            f"(import failed: {type(exc).__name__}: {exc}); install them with `{INSTALL_COMMAND}` "
            f"(or pip install -e '.[det]' beside an mmcv 2.1 with ops)") from exc
    except AssertionError as exc:  # mmdet asserts the mmcv / mmengine version range on import
        raise MissingDependencyError(f"installed mmcv / mmengine do not fit mmdet {MMDET_VERSION} ({exc}); "
                                     f"run `{INSTALL_COMMAND} --force`") from exc
    if mmdet.__version__ != MMDET_VERSION or not mmcv.__version__.startswith(MMCV_SERIES):
        raise MissingDependencyError(f"found mmdet {mmdet.__version__} / mmcv {mmcv.__version__}; the detection "
                                     f"protocol is pinned to mmdet {MMDET_VERSION} / mmcv {MMCV_SERIES}x: "
                                     f"run `{INSTALL_COMMAND} --force`")


def compiled_cuda_version() -> str:
    """The CUDA version mmcv's ops were built with, or ``not available``."""
    from mmcv.ops import get_compiling_cuda_version

    return str(get_compiling_cuda_version())


def check_ops_for_device(device_type: str, cuda_version: str | None = None) -> None:
    """Refuse a GPU run whose mmcv ops were built without CUDA (ConfigError, one line)."""
    if device_type != "cuda":
        return
    built = compiled_cuda_version() if cuda_version is None else cuda_version
    if built == NO_CUDA:
        raise ConfigError(f"detection on the GPU needs mmcv's ops built for CUDA (RoIAlign, NMS), but the installed "
                          f"mmcv was built for the CPU only; run `{INSTALL_COMMAND} --force` on a machine with "
                          f"nvcc and a GPU (it builds the CUDA ops there), or run on the CPU (--device cpu)")
