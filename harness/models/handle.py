"""A model to evaluate: a backbone plus the identity that keys caches and records."""
from __future__ import annotations

import hashlib

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from harness.models.checkpoints import load_backbone
from harness.models.feature_backbone import AdaptedBackbone, state_content_hash
from harness.runtime.device import module_device, resolve_device

if TYPE_CHECKING:  # building a ViT imports timm: only random_init does, when called
    from harness.models.backbone import ViTBackbone


@dataclass
class ModelHandle:
    name: str
    backbone: ViTBackbone | AdaptedBackbone  # anything with the feature contract (harness.models.feature_backbone)
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def cache_key(self) -> str:
        """Identity of the weights: the checkpoint's sha256, else a hash of the tensors
        themselves (so two different in-memory models can never share cached features).
        A forward setting the weights do not show (the position interpolation of MAE or
        DINOv2-with-registers, recorded in the checkpoint's arch_kwargs) makes it another
        model: the key then hashes the weights' identity with that setting.

        An adapted model (timm, transformers, torch.hub, user code) is keyed by the content of
        its weights (the sha256 a harness checkpoint of the same tensors would have) with what
        its adapter chose; a plain timm ViT computes what the harness ViT computes and shares
        its key."""
        if isinstance(self.backbone, AdaptedBackbone):
            return self._adapted_key()
        if self.meta.get("sha256"):
            key = self.meta["sha256"]
        elif self.meta.get("identity"):  # a model without weights (context rows: pixels, chance)
            key = self.meta["identity"]
        else:
            if "_weights_hash" not in self.meta:
                h = hashlib.sha256()
                for name, t in sorted(self.backbone.state_dict().items()):
                    h.update(name.encode())
                    h.update(t.detach().cpu().contiguous().numpy().tobytes())
                self.meta["_weights_hash"] = "weights-" + h.hexdigest()
            key = self.meta["_weights_hash"]
        interp = self.backbone.pos_interp_id
        if interp == "official":  # the default: keys of earlier records and caches stay valid
            return key
        return "fwd-" + hashlib.sha256(f"{key}|pos_interp={interp}".encode()).hexdigest()

    def _adapted_key(self) -> str:
        if "_weights_hash" not in self.meta:
            self.meta["_weights_hash"] = state_content_hash(self.backbone.weights_state())
        key = self.meta["_weights_hash"]
        if not self.backbone.native_equivalent():  # the adapter's settings hold its pos_interp
            return "m-" + hashlib.sha256(f"{key}|{self.backbone.adapter_key()}".encode()).hexdigest()
        interp = self.backbone.pos_interp_id
        if interp == "official":
            return key
        return "fwd-" + hashlib.sha256(f"{key}|pos_interp={interp}".encode()).hexdigest()

    @property
    def device(self) -> torch.device:
        return module_device(self.backbone)

    @property
    def context(self) -> str | None:
        """Which context row this model is (``random_init``, ``pixels``, ``supervised``,
        ``chance``; harness.context), or None for a method's or a checkpoint's model."""
        return self.meta.get("context")

    def to(self, device: str | torch.device | None) -> "ModelHandle":
        """Move the backbone to a device spec (harness.runtime.device: auto | cpu | cuda | cuda:N)."""
        self.backbone.to(resolve_device(device))
        return self

    def record_info(self) -> dict[str, Any]:
        """The `model` block of a result record."""
        m = self.meta
        return {
            "name": self.name,
            "method": m.get("method", "random_init"),
            "arch": self.backbone.arch,
            "patch_size": self.backbone.patch_size,
            "pretrain_data": m.get("pretrain_data"),
            "epochs": m.get("epochs"),
            "steps": m.get("steps"),
            "checkpoint": m.get("checkpoint"),
            "checkpoint_sha256": m.get("sha256"),
            "init_seed": m.get("init_seed"),
            "context": m.get("context"),  # None, or the kind of context row (harness.context)
            "weights_key": self.cache_key,  # what records and artifacts are keyed by
            # what the protocols' feature path depends on beyond the weights: register tokens
            # (run through every block, never among the patch features) and how position
            # embeddings are resized for inputs other than the training size
            "reg_tokens": int(self.backbone.num_reg_tokens),
            "pos_interp": self.backbone.pos_interp_id,
            # how a foreign model's features were read (layers, pooling, stride, normalisation)
            **({"adapter": self.backbone.adapter_info(), "spec": m.get("spec")}
               if isinstance(self.backbone, AdaptedBackbone) else {}),
        }

    @classmethod
    def from_checkpoint(cls, path: str | Path, name: str | None = None, **backbone_kwargs) -> "ModelHandle":
        backbone, meta = load_backbone(path, **backbone_kwargs)
        meta = dict(meta, checkpoint=str(path))
        return cls(name or Path(path).with_suffix("").name, backbone.eval(), meta)

    @classmethod
    def random_init(cls, arch: str, seed: int = 0, name: str | None = None, **overrides) -> "ModelHandle":
        from harness.models.backbone import create_backbone

        # The same init seed always gives the same weights, so random baselines are reproducible.
        with torch.random.fork_rng():
            torch.manual_seed(seed)
            backbone = create_backbone(arch, **overrides)
        meta = {"method": "random_init", "init_seed": seed, "epochs": 0, "steps": 0, "context": "random_init"}
        return cls(name or f"random_init-{arch}", backbone.eval(), meta)
