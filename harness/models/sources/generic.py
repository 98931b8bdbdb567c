"""Feature backbones for modules that come from torch.hub repositories or user code, and the
choice of adapter for any module.

A module is read, in this order, through: the user's own feature function; timm's
``forward_intermediates`` (any timm model, whatever returned it); a transformers vision
model's hidden states; the ``get_intermediate_layers`` of the DINO / iBOT / DINOv2 ViTs
(what their hub entries return). Anything else needs a feature function, and says so.

A user feature function is called as ``fn(model, x, n_last_blocks, final_norm)`` on
ImageNet-normalised images ``x`` (B, 3, H, W) and returns ``(cls, patches)``: cls (B, n, d),
patches (B, n, h, w, d), for the last n blocks (n = 1 for a model with one feature level).
"""
from __future__ import annotations

import inspect
from typing import Callable

import torch
from torch import nn

from harness.errors import ConfigError
from harness.models.backbone import BackboneFeatures
from harness.models.feature_backbone import AdaptedBackbone, InputNorm, probing

FeatureFn = Callable[..., tuple]


def _patch_size_of(model: nn.Module) -> int | None:
    for obj, attr in ((model, "patch_size"), (getattr(model, "patch_embed", None), "patch_size")):
        value = getattr(obj, attr, None) if obj is not None else None
        if isinstance(value, (tuple, list)):
            value = value[0]
        if isinstance(value, int) and value > 0:
            return value
    return None


class FunctionBackbone(AdaptedBackbone):
    """A module read through a user feature function. The stride, width and number of
    levels are measured once on a probe image when the function does not state them; the
    probe runs in eval mode under no_grad and leaves the module as it found it (a module in
    training mode would otherwise update its BatchNorm statistics on the probe)."""

    adapter_name = "function"

    def __init__(self, model: nn.Module, name: str, fn: FeatureFn, fn_name: str, *, patch_size: int | None = None,
                 num_blocks: int | None = None, probe_size: int = 224, input_norm: InputNorm | None = None,
                 norm_source: str = "default imagenet"):
        stride = patch_size or _patch_size_of(model)
        with probing(model):
            cls, patches = _call_feature_fn(fn, model, torch.zeros(1, 3, probe_size, probe_size), 1, True, fn_name)
        h = patches.shape[2]
        measured = probe_size // h if h else 0
        if stride is None:
            if measured <= 0 or probe_size % h:
                raise ConfigError(f"{name}: cannot tell the stride of the patch grid ({h} rows for a "
                                  f"{probe_size}-pixel probe); give patch_size=N")
            stride = measured
        elif stride * h != probe_size:
            raise ConfigError(f"{name}: patch_size {stride} but the feature function gave a {h}-row grid for a "
                              f"{probe_size}-pixel image; give patch_size={measured or 'N'} or fix the function")
        depth = num_blocks or int(getattr(model, "n_blocks", 0) or len(getattr(model, "blocks", [])) or 1)
        super().__init__(model, arch=f"function:{name}", patch_size=stride, embed_dim=int(patches.shape[-1]),
                         num_blocks=depth, input_norm=input_norm if input_norm is not None else InputNorm(),
                         input_size=None, settings={"feature_fn": fn_name, "pooling": "function",
                                                    "layers": "function"}, norm_source=norm_source)
        self.fn = fn
        self.fn_name = fn_name
        if cls.shape[-1] != self.embed_dim:
            raise ConfigError(f"{name}: the feature function's global feature has width {cls.shape[-1]} but its "
                              f"patch features have {self.embed_dim}")

    def _features(self, x, n_last_blocks, final_norm):
        cls, patches = _call_feature_fn(self.fn, self.model, x, n_last_blocks, final_norm, self.fn_name)
        return BackboneFeatures(cls=cls, patches=patches)


def _call_feature_fn(fn: FeatureFn, model: nn.Module, x: torch.Tensor, n: int, final_norm: bool, fn_name: str = ""):
    try:
        out = fn(model, x, n, final_norm)
    except Exception as exc:  # noqa: BLE001 - the user's code: one line that says where it failed
        raise ConfigError(f"feature function {fn_name or getattr(fn, '__name__', '?')} failed on a "
                          f"{tuple(x.shape)} input: {user_failure(exc)}") from exc
    if not (isinstance(out, (tuple, list)) and len(out) == 2
            and all(isinstance(t, torch.Tensor) for t in out)):
        raise ConfigError(f"feature function {fn_name or getattr(fn, '__name__', '?')} must return (cls, patches) "
                          f"tensors (docs/MODELS.md, the feature contract), found {type(out).__name__}")
    cls, patches = out
    if cls.ndim != 3 or patches.ndim != 5 or cls.shape[1] != n or patches.shape[1] != n:
        raise ConfigError(f"feature function {fn_name or getattr(fn, '__name__', '?')} must return cls (B, {n}, d) "
                          f"and patches (B, {n}, h, w, d); found {tuple(cls.shape)} and {tuple(patches.shape)}")
    return cls, patches


def user_failure(exc: BaseException) -> str:
    """``Type: message (file:line)`` of an exception raised in user code, at its innermost frame:
    enough to find the line without a traceback."""
    import traceback

    frames = traceback.extract_tb(exc.__traceback__)
    # a SyntaxError names its own file and line; its innermost frame is importlib's
    where = f" ({frames[-1].filename}:{frames[-1].lineno})" if frames and not isinstance(exc, SyntaxError) else ""
    message = " ".join(str(exc).split())  # one line, whatever the exception's text holds
    return f"{type(exc).__name__}: {message[:300]}{where}"


class IntermediateLayersBackbone(AdaptedBackbone):
    """The ViTs of the DINO, iBOT and DINOv2 repositories, through their
    ``get_intermediate_layers`` (DINOv2's: class token and grid, with or without the final
    norm; DINO's: the normed tokens of the last n blocks)."""

    adapter_name = "get_intermediate_layers"

    def __init__(self, model: nn.Module, name: str, input_norm: InputNorm | None = None,
                 norm_source: str = "default imagenet"):
        patch = _patch_size_of(model)
        if patch is None:
            raise ConfigError(f"{name}: a get_intermediate_layers model must state its patch size")
        dinov2_style = "return_class_token" in inspect.signature(model.get_intermediate_layers).parameters
        regs = int(getattr(model, "num_register_tokens", 0) or 0)
        super().__init__(model, arch=name, patch_size=patch, embed_dim=int(model.embed_dim),
                         num_blocks=len(model.blocks), input_size=None,
                         input_norm=input_norm if input_norm is not None else InputNorm(),
                         settings={"pooling": "token", "layers": "last n blocks",
                                   "api": "dinov2" if dinov2_style else "dino", "pos_interp": "model"},
                         norm_source=norm_source)
        self.dinov2_style = dinov2_style
        self.num_reg_tokens = regs

    def _features(self, x, n_last_blocks, final_norm):
        h, w = x.shape[-2] // self.patch_size, x.shape[-1] // self.patch_size
        if self.dinov2_style:
            outs = self.model.get_intermediate_layers(x, n_last_blocks, reshape=True, return_class_token=True,
                                                      norm=final_norm)
            patches = torch.stack([p.permute(0, 2, 3, 1) for p, _ in outs], dim=1)
            cls = torch.stack([c for _, c in outs], dim=1)
            return BackboneFeatures(cls=cls, patches=patches)
        if not final_norm:
            raise ConfigError(f"{self.arch}: DINO's get_intermediate_layers always applies the final norm; "
                              f"final_norm=False is not available")
        tokens = torch.stack(list(self.model.get_intermediate_layers(x, n_last_blocks)), dim=1)
        b, n, t, d = tokens.shape
        prefix = t - h * w
        return BackboneFeatures(cls=tokens[:, :, 0], patches=tokens[:, :, prefix:].reshape(b, n, h, w, d))


def adapt_module(model: nn.Module, name: str, *, features: FeatureFn | None = None, features_name: str = "",
                 patch_size: int | None = None, input_norm: InputNorm | None = None,
                 norm_source: str = "default imagenet") -> AdaptedBackbone:
    """The adapter for a module (see the module docstring for the order). ``input_norm``: the
    normalisation the caller knows the module expects (ImageNet's by default); a module's own
    pretrained configuration is never read for it."""
    if not isinstance(model, nn.Module):
        raise ConfigError(f"{name}: expected a torch.nn.Module, found {type(model).__name__}")
    norm = {"input_norm": input_norm, "norm_source": norm_source}
    if features is not None:
        return FunctionBackbone(model, name, features, features_name, patch_size=patch_size, **norm)
    if hasattr(model, "forward_intermediates") and getattr(model, "feature_info", None):
        from harness.models.sources.timm_adapter import TimmBackbone

        return TimmBackbone(model, name, **norm)
    if hasattr(model, "config") and hasattr(model, "can_generate"):  # a transformers PreTrainedModel
        from harness.models.sources.hf_adapter import HFBackbone

        return HFBackbone(model, name, **norm)
    if hasattr(model, "get_intermediate_layers") and hasattr(model, "blocks"):
        return IntermediateLayersBackbone(model, name, **norm)
    raise ConfigError(f"{name}: {type(model).__name__} has no feature API that ssl-bench knows "
                      f"(timm's forward_intermediates, transformers hidden states, get_intermediate_layers); "
                      f"give a feature function: features=module:function (see docs/MODELS.md)")
