"""The feature contract every protocol reads, and what an adapter around a foreign model adds.

A backbone, whichever library built it, answers ``get_features(x, n_last_blocks, final_norm)`` with
:class:`~harness.models.backbone.BackboneFeatures`: a global feature per kept block (the class
token, or the model's own pooled feature) and a spatial grid of patch features with its
stride (``patch_size``). ``x`` is what the protocols' transforms give: RGB normalised with
the ImageNet mean and std. It also states ``embed_dim``, ``num_blocks`` (how many blocks
``n_last_blocks`` may take), ``arch``, ``pos_interp_id`` and ``num_reg_tokens``.

The harness's own ViT (harness.models.backbone) and the raw-pixel baseline implement it
natively. :class:`AdaptedBackbone` wraps any other ``nn.Module``; what the adapter chose
(layers, pooling, stride, input normalisation) is its ``adapter_info``, which goes into the
record's model block and, with the weights' content, into the identity of cached features.
"""
from __future__ import annotations

import hashlib
import json
import struct
from contextlib import contextmanager
from typing import Any, Iterator

import torch
from torch import nn

from harness.errors import ConfigError

# The normalisation the protocols' transforms apply (harness.data.transforms); a model that
# declares another one gets its input re-normalised inside the adapter.
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
# the normalisations a spec may name (norm=NAME): OpenAI CLIP's (open_clip's OPENAI_DATASET_MEAN/STD),
# and the 0.5 / 0.5 of Inception, SigLIP and timm's augreg ViTs
NAMED_NORMS = {"imagenet": (IMAGENET_MEAN, IMAGENET_STD),
               "clip": ((0.48145466, 0.4578275, 0.40821073), (0.26862954, 0.26130258, 0.27577711)),
               "inception": ((0.5, 0.5, 0.5), (0.5, 0.5, 0.5))}


@contextmanager
def probing(model: nn.Module) -> Iterator[None]:
    """A measurement at build time (a probe image through a feature function) that changes
    nothing: eval mode, so BatchNorm neither uses batch statistics nor updates its running ones,
    and no_grad; every submodule's own train/eval flag is put back afterwards."""
    modes = [(m, m.training) for m in model.modules()]
    model.eval()
    try:
        with torch.no_grad():
            yield
    finally:
        for m, mode in modes:
            m.training = mode


# safetensors' dtype names, in the order its serializer lays tensors out (larger first; then by
# name): the header and data below are byte for byte what `safetensors.torch.save` writes
_SAFETENSORS_DTYPES = [
    (torch.uint64, "U64"), (torch.int64, "I64"), (torch.float64, "F64"), (torch.complex64, "C64"),
    (torch.float32, "F32"), (torch.uint32, "U32"), (torch.int32, "I32"), (torch.bfloat16, "BF16"),
    (torch.float16, "F16"), (torch.uint16, "U16"), (torch.int16, "I16"), (torch.float8_e4m3fn, "F8_E4M3"),
    (torch.float8_e5m2, "F8_E5M2"), (torch.int8, "I8"), (torch.uint8, "U8"), (torch.bool, "BOOL"),
]
_DTYPE_NAME = {dt: name for dt, name in _SAFETENSORS_DTYPES}
_DTYPE_RANK = {dt: i for i, (dt, _) in enumerate(_SAFETENSORS_DTYPES)}


def state_content_hash(state: dict[str, torch.Tensor]) -> str:
    """sha256 of the weights as a safetensors file without metadata: the sha256 of the
    .safetensors that ``save_checkpoint`` writes for the same tensors, so a model loaded in
    memory and the same weights converted to a harness checkpoint share one identity.
    Streamed tensor by tensor: no copy of the whole model is held."""
    tensors = {k: v.detach() for k, v in state.items()}
    if any(t.dtype not in _DTYPE_NAME for t in tensors.values()):
        from safetensors.torch import save

        return hashlib.sha256(save({k: v.cpu().contiguous() for k, v in tensors.items()})).hexdigest()
    order = sorted(tensors, key=lambda k: (_DTYPE_RANK[tensors[k].dtype], k))
    header, offset = {}, 0
    for k in order:
        t = tensors[k]
        size = t.numel() * t.element_size()
        header[k] = {"dtype": _DTYPE_NAME[t.dtype], "shape": list(t.shape), "data_offsets": [offset, offset + size]}
        offset += size
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    digest = hashlib.sha256(struct.pack("<Q", len(text)) + text)
    for k in order:
        t = tensors[k].cpu().contiguous()
        if t.numel():
            digest.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


class InputNorm(nn.Module):
    """Maps ImageNet-normalised input to the normalisation a model declares (a no-op, and no
    arithmetic at all, when it declares ImageNet's)."""

    def __init__(self, mean=IMAGENET_MEAN, std=IMAGENET_STD):
        super().__init__()
        self.mean = tuple(float(m) for m in mean)
        self.std = tuple(float(s) for s in std)
        if len(self.mean) != 3 or len(self.std) != 3 or min(self.std) <= 0:
            raise ConfigError(f"input normalisation needs 3 means and 3 positive stds, found "
                              f"mean {mean} std {std}")
        self.identity = _close(self.mean, IMAGENET_MEAN) and _close(self.std, IMAGENET_STD)
        # x_model = (x * std_in + mean_in - mean) / std = x * scale + shift
        scale = torch.tensor([si / s for si, s in zip(IMAGENET_STD, self.std)]).view(1, 3, 1, 1)
        shift = torch.tensor([(mi - m) / s for mi, m, s in zip(IMAGENET_MEAN, self.mean, self.std)]).view(1, 3, 1, 1)
        self.register_buffer("scale", scale, persistent=False)
        self.register_buffer("shift", shift, persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.identity:
            return x
        return x * self.scale.to(x.dtype) + self.shift.to(x.dtype)

    def describe(self) -> str:
        if self.identity:
            return "imagenet"
        return f"mean={list(self.mean)},std={list(self.std)}"


def _close(a, b) -> bool:
    return all(abs(x - y) < 1e-6 for x, y in zip(a, b))


class AdaptedBackbone(nn.Module):
    """Base of the adapters around foreign models (timm, transformers, torch.hub, user code).

    Subclasses set ``model`` (the wrapped module), ``patch_size`` (the stride of the patch
    grid), ``embed_dim``, ``num_blocks``, ``arch`` and implement ``_features``; ``settings``
    holds what the adapter chose and is recorded."""

    num_reg_tokens = 0

    def __init__(self, model: nn.Module, *, arch: str, patch_size: int, embed_dim: int, num_blocks: int,
                 input_norm: InputNorm, input_size: int | None, settings: dict[str, Any],
                 norm_source: str = "default imagenet"):
        super().__init__()
        # why this normalisation (stated, a folder's file, a pretrained tag, a family, the default):
        # recorded, not keyed (the same mean and std reached for two reasons give the same features)
        self.norm_source = norm_source
        self.model = model
        self.arch = arch
        self.patch_size = int(patch_size)
        self.embed_dim = int(embed_dim)
        self.num_blocks = int(num_blocks)
        self.input_norm = input_norm
        self.input_size = input_size
        self.settings = dict(settings)
        self.arch_kwargs = {"patch_size": self.patch_size, "embed_dim": self.embed_dim}

    @property
    def pos_interp_id(self) -> str:
        """How position embeddings are resized: by the library, or "none" without them."""
        return str(self.settings.get("pos_interp", "none"))

    def adapter_info(self) -> dict[str, Any]:
        """What the adapter chose, as recorded in the model block and keyed into caches."""
        return {"adapter": type(self).adapter_name, "arch": self.arch, "stride": self.patch_size,
                "embed_dim": self.embed_dim, "input_norm": self.input_norm.describe(),
                "norm_source": self.norm_source, "input_size": self.input_size, **self.settings}

    def adapter_key(self) -> str:
        info = {k: v for k, v in self.adapter_info().items() if k != "norm_source"}
        return hashlib.sha256(json.dumps(info, sort_keys=True, default=str).encode()).hexdigest()

    def native_equivalent(self) -> bool:
        """Whether the harness ViT computes these very features from the same weights (then
        the adapter adds nothing to the identity)."""
        return False

    def weights_state(self) -> dict[str, torch.Tensor]:
        return self.model.state_dict()

    def check_blocks(self, n_last_blocks: int) -> None:
        if not 1 <= n_last_blocks <= self.num_blocks:
            reason = (f"{self.arch} gives one feature level" if self.num_blocks == 1
                      else f"{self.arch} has {self.num_blocks} blocks of width {self.embed_dim}")
            raise ConfigError(f"n_last_blocks must be in [1, {self.num_blocks}], found {n_last_blocks} ({reason})")

    def get_features(self, x: torch.Tensor, n_last_blocks: int = 1, final_norm: bool = True):
        self.check_blocks(n_last_blocks)
        if x.ndim != 4 or x.shape[1] != 3:
            raise ValueError(f"expected images (B, 3, H, W), found {tuple(x.shape)}")
        if x.shape[-2] % self.patch_size or x.shape[-1] % self.patch_size:
            raise ValueError(f"input {x.shape[-2]}x{x.shape[-1]} is not a multiple of the stride {self.patch_size}")
        return self._features(self.input_norm(x), n_last_blocks, final_norm)

    def _features(self, x: torch.Tensor, n_last_blocks: int, final_norm: bool):
        raise NotImplementedError

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.get_features(x).cls[:, -1]


def is_adapted(backbone: nn.Module) -> bool:
    return isinstance(backbone, AdaptedBackbone)
