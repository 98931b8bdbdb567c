"""Input sizes the robustness protocol feeds beyond its ``crop`` (which the runner checks): the
backgrounds challenge's images at their native size (the official ToTensor, no resize) and the
crop fed to a saliency model of another stride. Each is checked before the head is trained."""
from __future__ import annotations

from pathlib import Path

from harness.errors import ConfigError

OCCLUSION = "occlusion (the [CLS] attention saliency)"


def _others(shifts: list[str], leave_out: str) -> str:
    return "[" + ", ".join(s for s in shifts if s != leave_out) + "]"


def check_native_sizes(model, root: Path, variants: list[str], shifts: list[str]) -> None:
    """Each backgrounds variant's first image (the release's are all one size) against the
    model's stride: a size it cannot take is one error line naming what to set."""
    from harness.data.imagenet_shifts import BackgroundsChallenge

    stride = getattr(model.backbone, "patch_size", None)
    if not isinstance(stride, int) or stride <= 1:
        return
    for variant in variants:
        data = BackgroundsChallenge(root, variant)
        if not len(data):
            continue
        width, height = data.load_image(0).size
        if width % stride or height % stride:
            raise ConfigError(
                f"robustness: the backgrounds challenge's {variant} images ({root / variant}) are "
                f"{width}x{height}, fed at their native size as the official evaluation does, and that is not "
                f"a multiple of the stride {stride} of model {model.name} ({model.backbone.arch}); leave the "
                f"backgrounds out (--set robustness.shifts={_others(shifts, 'backgrounds')}) or evaluate a "
                f"model whose stride divides {width} and {height}")


def check_saliency_stride(crop: int, stride: int, spec: str, model_name: str) -> None:
    """The crop fed to the saliency model against its stride (its patch grid is the drops' grid)."""
    if crop % stride:
        lower, upper = max(stride, crop // stride * stride), (crop // stride + 1) * stride
        raise ConfigError(f"robustness: crop {crop} is not a multiple of the stride {stride} of the saliency model "
                          f"{spec} (occlusion on model {model_name}); set crop={lower} or {upper} that both models "
                          f"take (--set robustness.crop=N), or saliency=self")
