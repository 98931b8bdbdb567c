"""The first layers of a pretraining projection head, read from the official file a model was
imported from (iBOT's semi-supervised fine-tuning starts from them: ``--finetune_head_layer``).

The DINO / iBOT / CrIBo / CrOC heads are an MLP ``head.mlp`` of Linear layers with an activation
between them (GELU by default, no norm): ``mlp.0`` in -> hidden, ``mlp.2`` hidden -> hidden, ...,
the last Linear to the bottleneck. The full training checkpoints (``teacher`` -> ``head.*``,
``student`` -> ``module.head.*``) and iBOT's ``checkpoint_teacher.pth`` written with
``--with_head`` hold it; the backbone-only releases and harness checkpoints (the backbone alone)
do not. A harness checkpoint made by ``zoo import`` names its source file, that file's sha256,
layout and branch in its metadata: the head is read from that file, after checking its hash.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from harness.errors import CheckpointError, ConfigError
from harness.io_utils import sha256_file

HeadLayers = list[tuple[torch.Tensor, torch.Tensor]]  # (weight (out, in), bias (out,)) per Linear


def _head_prefix(backbone_prefix: str) -> str:
    """The head's key prefix beside a layout's backbone prefix (``backbone.`` -> ``head.``)."""
    if backbone_prefix.endswith("backbone."):
        return backbone_prefix[:-len("backbone.")] + "head."
    return backbone_prefix + "head."


def head_layers_from_state(state: dict[str, Any], prefix: str, n_layers: int, source: str) -> HeadLayers:
    """The first ``n_layers`` Linear layers (``<prefix>mlp.0``, ``mlp.2``, ...) of a head whose
    MLP alternates Linear and a parameter-free activation; all but the last Linear of the MLP
    (the bottleneck, followed by the normalised prototypes) may be taken."""
    if all(k.startswith("module.") for k in state) and not prefix.startswith("module."):
        state = {k[len("module."):]: v for k, v in state.items()}
    linears = sorted({int(k[len(prefix + "mlp."):].split(".")[0]) for k in state
                      if k.startswith(prefix + "mlp.") and k.endswith(".weight")})
    if not linears:
        raise ConfigError(f"{source} holds no projection head ({prefix}mlp.0.weight not found); "
                          f"fine-tune from the backbone (finetune_head_layer=0) or use the method's full "
                          f"training checkpoint")
    expected = [2 * i for i in range(len(linears))]
    if linears != expected:
        raise ConfigError(f"{source}: the projection head's parameterised layers are mlp.{linears}, not "
                          f"Linear layers with an activation between them (mlp.{expected}): a head with "
                          f"norm layers is not the one the official fine-tuning code rebuilds")
    if n_layers > len(linears) - 1:
        raise ConfigError(f"{source}: the projection head has {len(linears)} Linear layers; finetune_head_layer "
                          f"{n_layers} asks for more than the {len(linears) - 1} before its bottleneck")
    layers: HeadLayers = []
    for i in expected[:n_layers]:
        weight, bias = state.get(f"{prefix}mlp.{i}.weight"), state.get(f"{prefix}mlp.{i}.bias")
        if not isinstance(weight, torch.Tensor) or weight.ndim != 2 or not isinstance(bias, torch.Tensor):
            raise ConfigError(f"{source}: {prefix}mlp.{i} is not a Linear layer with a bias")
        if layers and weight.shape[1] != layers[-1][0].shape[0]:
            raise ConfigError(f"{source}: {prefix}mlp.{i} takes {weight.shape[1]} inputs after "
                              f"{layers[-1][0].shape[0]} outputs")
        layers.append((weight.detach().float().clone(), bias.detach().float().clone()))
    return layers


def read_head_layers(meta: dict[str, Any], n_layers: int, model_name: str) -> HeadLayers:
    """The first ``n_layers`` Linear layers of the projection head of the official file that a
    model's metadata names (``source_file``, ``source_sha256``, ``layout``, ``branch``)."""
    from harness.models.importers import LAYOUTS, branch_state, read_file

    source = meta.get("source_file")
    if not source:
        raise ConfigError(f"{model_name} was not imported from a pretraining checkpoint file (its metadata names "
                          f"no source_file), so its projection head is unknown: set finetune_head_layer=0, or "
                          f"import the method's full training checkpoint with `ssl-bench zoo import`")
    path, layout = Path(source), meta.get("layout")
    if not path.is_file():
        raise ConfigError(f"{model_name}: its source file {path} (which holds the projection head) is gone; "
                          f"put it back or set finetune_head_layer=0")
    if meta.get("source_sha256") and sha256_file(path) != meta["source_sha256"]:
        raise ConfigError(f"{model_name}: {path} is not the file it was imported from (its sha256 differs from "
                          f"the recorded {meta['source_sha256'][:12]}...)")
    if layout not in LAYOUTS:
        raise ConfigError(f"{model_name}: its metadata names no known checkpoint layout ({layout!r})")
    # the same bytes were unpickled, trusted, when the model was imported from them
    trusted = bool((meta.get("import_report") or {}).get("unpickled"))
    try:
        obj, _ = read_file(path, trust=trusted)
        branch = "student" if meta.get("branch") == "student" and LAYOUTS[layout].has_student else "teacher"
        state, prefix = branch_state(obj, layout, branch)
    except CheckpointError as exc:
        raise ConfigError(f"{model_name}: cannot read the projection head from {path}: {exc}") from exc
    return head_layers_from_state(state, _head_prefix(prefix), n_layers, f"{path} ({layout}, {branch})")
