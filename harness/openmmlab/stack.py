"""The mmsegmentation stack the protocols are pinned to, and the one error that says how to
install it when it is missing or another version."""
from __future__ import annotations

from harness.errors import MissingDependencyError

INSTALL_COMMAND = "bash scripts/install_mmcv.sh"
MMSEG_VERSION = "1.2.2"
MMCV_VERSION = "2.1.0"


def require_mmseg() -> None:
    """Import the mmseg stack or raise :class:`MissingDependencyError` saying how to install it."""
    try:
        import mmcv
        import mmcv.ops  # noqa: F401  (needs the compiled extension)
        import mmengine  # noqa: F401
        import mmseg
        import mmseg.models  # noqa: F401
    except (ImportError, OSError) as exc:
        raise MissingDependencyError(
            f"this protocol needs mmcv {MMCV_VERSION} with compiled ops, mmengine 0.10.7 and "
            f"mmsegmentation {MMSEG_VERSION}; importing them failed ({type(exc).__name__}: {exc}). "
            f"Install them with `{INSTALL_COMMAND}` (uses a prebuilt wheel from $MMCV_WHEEL_DIR "
            f"when set, else compiles mmcv, ~30 min on 2 cores)") from exc
    except AssertionError as exc:  # mmseg asserts the mmcv / mmengine version range on import
        raise MissingDependencyError(
            f"installed mmcv/mmengine do not fit mmsegmentation {MMSEG_VERSION} ({exc}); "
            f"run `{INSTALL_COMMAND} --force`") from exc
    if mmseg.__version__ != MMSEG_VERSION or not mmcv.__version__.startswith("2.1."):
        raise MissingDependencyError(
            f"found mmseg {mmseg.__version__} / mmcv {mmcv.__version__}, the protocols are pinned "
            f"to mmseg {MMSEG_VERSION} / mmcv 2.1.x; run `{INSTALL_COMMAND} --force`")
