"""The sources of harness models: `checkpoint:`, `random_init:`, `zoo:`."""
from __future__ import annotations

from typing import Any


from harness.models.handle import ModelHandle
from harness.registry import register_model_source
from harness.models.sources.common import (BuildContext, ModelSpec, Options, file_stamps, require_target)


# ----------------------------------------------------------------------------- harness checkpoints
@register_model_source("checkpoint")
def checkpoint_source(spec: ModelSpec, ctx: BuildContext) -> ModelHandle:
    """A harness checkpoint; ``pos_interp=timm`` resizes position embeddings as timm does."""
    opts = Options(spec)
    path = require_target(spec, "path")
    pos_interp = opts.take("pos_interp")
    opts.done(("pos_interp",))
    kw = {"pos_interp": pos_interp} if pos_interp else {}
    return ModelHandle.from_checkpoint(path, name=spec.name, **kw)


def _checkpoint_inputs(spec: ModelSpec, ctx: BuildContext) -> dict[str, Any] | None:
    from harness.models.checkpoints import checkpoint_files

    return {"files": file_stamps(checkpoint_files(require_target(spec, "path")))}


checkpoint_source.inputs = _checkpoint_inputs


@register_model_source("random_init")
def random_init_source(spec: ModelSpec, ctx: BuildContext) -> ModelHandle:
    """The harness ViT ``arch`` at its seeded initialisation; other options override the
    architecture (harness.models.backbone.ARCH_KEYS)."""
    overrides = dict(spec.options)
    seed = int(overrides.pop("seed", 0))
    return ModelHandle.random_init(spec.target or "vit_cpu_tiny", seed=seed, name=spec.name, **overrides)


random_init_source.inputs = lambda spec, ctx: {"files": []}  # the spec and the libraries make it


@register_model_source("zoo")
def zoo_source(spec: ModelSpec, ctx: BuildContext) -> ModelHandle:
    from harness.models.zoo import zoo_model
    from harness.paths import default_zoo_dir

    opts = Options(spec)
    trust = bool(opts.take("trust", ctx.trust))
    opts.done(("trust",))
    return zoo_model(require_target(spec, "name"), ctx.zoo_dir or default_zoo_dir(), trust=trust,
                     zoo_path=ctx.zoo_path, display_name=spec.name)


def _zoo_inputs(spec: ModelSpec, ctx: BuildContext) -> dict[str, Any] | None:
    """An imported or shipped harness checkpoint's files; None for an official file that is
    imported on first use (building the model imports it)."""
    from harness.models.checkpoints import checkpoint_files
    from harness.models.zoo import find_checkpoint
    from harness.paths import default_zoo_dir

    found = find_checkpoint(require_target(spec, "name"), ctx.zoo_dir or default_zoo_dir(), ctx.zoo_path)
    if found.status != "harness":
        return None
    return {"files": file_stamps(checkpoint_files(found.path))}


zoo_source.inputs = _zoo_inputs
