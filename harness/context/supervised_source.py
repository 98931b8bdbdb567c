"""The `supervised` model source: the supervised reference row (harness.context.supervised),
trained on the suite's data."""
from __future__ import annotations

from pathlib import Path

from harness.config import from_dict
from harness.models.handle import ModelHandle
from harness.models.sources import BuildContext, ModelSpec
from harness.registry import register_model_source
from harness.training.model_source import suite_data


def validated_supervised_spec(options: dict, name: str):
    """The validated SupervisedSpec of a `supervised:` entry (unknown keys are an error)."""
    from harness.context.supervised import SupervisedSpec

    return from_dict(SupervisedSpec, dict(options), f"suite model {name!r} supervised")


def suite_supervised_checkpoint(spec, data, progress: bool = True, log=print, device: str = "auto") -> Path:
    """Train (or reuse the cached) supervised reference ``spec`` on a suite's data."""
    from harness.context.supervised import supervised_checkpoint

    return supervised_checkpoint(spec, Path(data.fill(spec.data_root)), device=device, progress=progress, log=log)


@register_model_source("supervised")
def supervised_source(spec: ModelSpec, ctx: BuildContext) -> ModelHandle:
    data = suite_data(spec, ctx)
    name = spec.name or "supervised"
    path = suite_supervised_checkpoint(validated_supervised_spec(spec.options, name), data, ctx.progress,
                                       ctx.log, ctx.device)
    return ModelHandle.from_checkpoint(path, name=name)  # its metadata names the context row
