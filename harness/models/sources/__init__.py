"""The model front door: a model spec, resolved by a registry of model sources.

Every way of getting a model (a suite's entry, ``ssl-bench eval --model``, ``reproduce``,
the Python API) goes through :func:`build_model`. A spec is a string or a mapping:

    zoo:synth_dino                              a shipped or imported zoo checkpoint
    checkpoint:runs/dino/backbone.safetensors   a harness checkpoint
    random_init:vit_small_patch16_224,seed=1    an architecture at its seeded initialisation
    timm:resnet50.a1_in1k,weights=r50.safetensors
                                                any timm model (weights: a local file, `cache`
                                                = timm's local cache, or `random`)
    hf:/models/dinov2-small                     a transformers vision model from a local folder
    hub:/repos/dinov2:dinov2_vits14,weights=dinov2_vits14.pth
                                                a torch.hub entry from a local repository folder
    code:my_models.py:build,features=my_models.py:feats
                                                user code returning an nn.Module
    open_clip:ViT-B-32,weights=open_clip_pytorch_model.bin
                                                an open_clip image tower, from a local file

    {source: timm, target: resnet18, weights: random, seed: 0}   the same as a mapping

The string form is ``SOURCE:TARGET[,key=value...]``; values are read as YAML scalars. Sources
register with ``@register_model_source(name)`` (entry-point group ``ssl_bench.model_sources``
for plugins) and are called as ``build(spec, ctx)``. No source falls back to random weights:
a missing weights file is a CheckpointError (an ``error:`` line, exit 2). Foreign sources take
``norm=imagenet|clip|inception`` or ``mean=R/G/B,std=R/G/B``; without them a model's normalisation
is what its own files state (a named timm tag, a folder's preprocessor_config.json, a family,
open_clip's config), else ImageNet's, and the record says which and why (``norm_source``).
"""
from harness.models.sources import harness_checkpoints, hf_source, open_clip_source, timm_source, user_code  # noqa: F401
from harness.models.sources.common import (BuildContext, ModelSpec, build_model, file_stamps, parse_spec,
                                           source_inputs)

__all__ = ["BuildContext", "ModelSpec", "build_model", "file_stamps", "parse_spec", "source_inputs"]
