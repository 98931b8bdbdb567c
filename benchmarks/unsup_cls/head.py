"""The projection head a self-distillation model was trained with, read from its official
training checkpoint, for unsup_cls.py's cluster assignment: the argmax of the head's K-way output
on the final-normed CLS token.

Harness checkpoints keep the backbone only (harness.models.importers drops ``head.*``), so the
head is read from the official file: the one named by ``head_checkpoint``, else the file the
harness checkpoint was imported from (its metadata's ``source_file``). The head must belong to
the model evaluated: a file whose sha256 is the model's ``source_sha256``, or whose backbone
weights are the model's own.

The head is iBOT's ``models/head.py`` DINOHead as unsup_cls.py builds it (``DINOHead(embed_dim,
out_dim, act='gelu')``): Linear-GELU-...-Linear, l2-normalised, then the weight-normalised
``last_layer`` (weight = g * v / ||v|| per output row). Only Linear layers are read: a head with
BatchNorm (``norm='bn'``) is not the one unsup_cls.py builds.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

from harness.errors import CheckpointError, ConfigError
from harness.io_utils import sha256_file
from harness.models.handle import ModelHandle

_LINEAR = re.compile(r"^mlp\.(\d+)\.weight$")
NO_HEAD = ("harness checkpoints keep the backbone only; pass the official training checkpoint that holds "
           "the head (e.g. iBOT's checkpoint.pth with teacher.head.*) as head_checkpoint, or leave 'head' out "
           "of assignments (--set assignments=[kmeans])")


@dataclass
class ProjectionHead:
    """Linear layers (weight, bias) with GELU between them, then the weight-normalised last layer."""

    layers: list[tuple[torch.Tensor, torch.Tensor]]
    last: torch.Tensor  # (K, bottleneck), the effective weight g * v / ||v||
    source: str
    source_sha256: str

    @property
    def out_dim(self) -> int:
        return int(self.last.shape[0])

    @property
    def in_dim(self) -> int:
        return int(self.layers[0][0].shape[1])

    @torch.no_grad()
    def assign(self, cls: torch.Tensor) -> torch.Tensor:
        """argmax over the K outputs (unsup_cls.py: ``output.max(dim=1)[1]``), per row of cls."""
        x = cls.float()
        for i, (w, b) in enumerate(self.layers):
            x = F.linear(x, w, b)
            if i < len(self.layers) - 1:
                x = F.gelu(x)
        x = F.normalize(x, dim=-1, p=2)
        return F.linear(x, self.last).argmax(dim=1)


def head_state(obj, branch: str, source: str) -> dict[str, torch.Tensor]:
    """The ``head.*`` tensors of ``branch`` (teacher: what unsup_cls.py's --checkpoint_key reads),
    ``module.`` prefixes removed, keys without ``head.``."""
    part = obj.get(branch) if isinstance(obj, dict) and isinstance(obj.get(branch), dict) else obj
    if not isinstance(part, dict):
        raise ConfigError(f"{source}: no {branch!r} state dict to read a projection head from")
    out = {}
    for k, v in part.items():
        k = k[len("module."):] if k.startswith("module.") else k
        if k.startswith("head.") and isinstance(v, torch.Tensor):
            out[k[len("head."):]] = v.float()
    if not out:
        raise ConfigError(f"{source}: holds no projection head (no head.* keys under {branch!r}); {NO_HEAD}")
    return out


def build_head(state: dict[str, torch.Tensor], source: str, sha: str) -> ProjectionHead:
    if any("running_mean" in k for k in state):
        raise ConfigError(f"{source}: its head has BatchNorm; unsup_cls.py builds DINOHead without norm layers")
    idx = sorted(int(m.group(1)) for k in state if (m := _LINEAR.match(k)))
    if not idx:
        raise ConfigError(f"{source}: head.* holds no mlp.N.weight layers")
    layers = [(state[f"mlp.{i}.weight"], state.get(f"mlp.{i}.bias", torch.zeros(state[f"mlp.{i}.weight"].shape[0])))
              for i in idx]
    g = state.get("last_layer.weight_g", state.get("last_layer.parametrizations.weight.original0"))
    v = state.get("last_layer.weight_v", state.get("last_layer.parametrizations.weight.original1"))
    if v is None:
        raise ConfigError(f"{source}: head.last_layer (weight_g / weight_v) not found")
    g = torch.ones(v.shape[0], 1) if g is None else g.reshape(v.shape[0], 1)
    last = g * v / v.norm(dim=1, keepdim=True)
    return ProjectionHead(layers, last, source, sha)


def _same_backbone(model: ModelHandle, obj, path: Path) -> bool:
    """Whether the file's backbone weights are the model's (for models without a source file)."""
    from harness.models.importers import detect_layout, extract_backbone

    try:
        state, _ = extract_backbone(obj, detect_layout(obj), "teacher")
    except CheckpointError:
        return False
    own = model.backbone.state_dict()
    shared = [k for k in state if k in own]
    return bool(shared) and len(shared) == len(state) and all(
        own[k].shape == state[k].shape and torch.equal(own[k].float().cpu(), state[k].float()) for k in shared)


def load_head(model: ModelHandle, head_checkpoint: str, branch: str, trust: bool) -> ProjectionHead:
    """The model's projection head, or a ConfigError saying why there is none."""
    from harness.models.importers import read_file

    given = head_checkpoint or model.meta.get("source_file") or ""
    path = Path(given).expanduser() if given else None
    if path is None or not path.is_file():
        where = f" ({given} is not a file)" if given else ""
        raise ConfigError(f"model {model.name} has no projection head{where}: {NO_HEAD}")
    sha = sha256_file(path)
    recorded = model.meta.get("source_sha256")
    try:  # the very file the model was imported from was trusted then (zoo import / convert)
        obj, _ = read_file(path, trust=trust or sha == recorded)
    except CheckpointError as exc:
        raise ConfigError(f"head_checkpoint {path}: {exc}") from None
    if recorded and recorded != sha:
        raise ConfigError(f"head_checkpoint {path} (sha256 {sha[:12]}) is not the file model {model.name} was "
                          f"imported from (sha256 {recorded[:12]}): its head belongs to another model")
    if not recorded and not _same_backbone(model, obj, path):
        raise ConfigError(f"head_checkpoint {path}: its {branch} backbone is not model {model.name}'s weights; "
                          f"a head is only meaningful on the backbone it was trained with")
    return build_head(head_state(obj, branch, str(path)), str(path), sha)
