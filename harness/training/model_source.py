"""The `pretrain` model source: a method config pretrained on the suite's data (checkpoints
cached by configuration, harness.training.cached_pretrain)."""
from __future__ import annotations

from pathlib import Path

from harness.errors import ConfigError
from harness.models.handle import ModelHandle
from harness.models.sources import BuildContext, ModelSpec
from harness.registry import register_model_source
from harness.training.cached_pretrain import PretrainRequest, pretrained_checkpoint


def suite_data(spec: ModelSpec, ctx: BuildContext):
    """The suite's data of a build (its ``pretrain_root``, ``pretrain_name``, ``fill``); a source
    that trains on it refuses to run outside a suite."""
    data = ctx.data
    if data is None or not hasattr(data, "pretrain_root"):
        raise ConfigError(f"model source {spec.source!r} trains on a suite's data: use it in a suite "
                          f"(configs/suites/), not on its own")
    return data


@register_model_source("pretrain")
def pretrain_source(spec: ModelSpec, ctx: BuildContext) -> ModelHandle:
    """A method config pretrained on the suite's data."""
    data = suite_data(spec, ctx)
    if data.pretrain_root is None:
        raise ConfigError(f"model {spec.name!r} needs pretraining data (suite pretrain_data)")
    request = PretrainRequest(name=spec.name or Path(spec.target).stem, pretrain=spec.target,
                              set=list(spec.options.get("set") or []))
    path = pretrained_checkpoint(request, data.pretrain_root, data.pretrain_name, ctx.progress, ctx.log, ctx.device)
    return ModelHandle.from_checkpoint(path, name=request.name)
