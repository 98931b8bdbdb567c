"""The Method contract every pretraining method (built-in or plugin) follows.

A method owns its student and teacher, its losses and what happens after each
step (EMA, centre updates). The engine (harness/training/engine.py) owns everything else:
optimizer, lr / weight-decay / EMA-momentum schedules, gradient clipping,
freezing the last layer, checkpoints, resume and distributed gradient averaging.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Iterator

import torch
from torch import nn

from harness.models.backbone import ViTBackbone, create_backbone
from harness.schedules import StepSchedule


@dataclass
class BackboneConfig:
    arch: str = "vit_cpu_tiny"
    drop_path_rate: float = 0.1  # student only; the teacher never drops paths
    img_size: int | None = None
    patch_size: int | None = None
    embed_dim: int | None = None
    depth: int | None = None
    num_heads: int | None = None

    def overrides(self) -> dict:
        keys = ("img_size", "patch_size", "embed_dim", "depth", "num_heads")
        return {k: getattr(self, k) for k in keys if getattr(self, k) is not None}

    def build(self, *, student: bool, use_mask_token: bool = False) -> ViTBackbone:
        return create_backbone(self.arch, drop_path_rate=self.drop_path_rate if student else 0.0,
                               use_mask_token=use_mask_token and student, **self.overrides())


@dataclass
class StepInfo:
    """What the engine knows about the current optimisation step."""

    step: int  # global step, 0-based
    epoch: int  # 0-based
    steps_per_epoch: int
    total_steps: int
    lr: float
    weight_decay: float
    momentum: float  # EMA momentum of the teacher at this step

    @property
    def epoch_float(self) -> float:
        return self.step / max(1, self.steps_per_epoch)


class Method(nn.Module):
    """Base class. Subclasses set ``Config`` (a dataclass: the method's schema) and
    create ``self.student`` and ``self.teacher`` (nn.Modules whose ``backbone``
    attribute is a ViTBackbone)."""

    Config: ClassVar[type]
    registry_name: ClassVar[str] = "?"

    def __init__(self, cfg: Any, backbone_cfg: BackboneConfig):
        super().__init__()
        self.cfg = cfg
        self.backbone_cfg = backbone_cfg

    # ---- data -------------------------------------------------------------
    def build_dataset(self, data_root: Path, seed: int) -> torch.utils.data.Dataset:
        raise NotImplementedError

    def collate(self, samples: list) -> Any:
        return torch.utils.data.default_collate(samples)

    # ---- optimisation -------------------------------------------------------
    # DistributedDataParallel raises when a trainable parameter gets no gradient in a step;
    # a method whose step may leave some unused (e.g. a head it skips) sets this.
    ddp_find_unused_parameters: ClassVar[bool] = False

    def training_step(self, batch: Any, step: StepInfo) -> dict[str, torch.Tensor]:
        """Return a dict of losses; ``loss`` is what the engine back-propagates."""
        raise NotImplementedError

    def forward(self, batch: Any, step: StepInfo) -> dict[str, torch.Tensor]:
        # The engine calls the method through DistributedDataParallel, which hooks forward().
        return self.training_step(batch, step)

    @torch.no_grad()
    def on_step_end(self, step: StepInfo) -> None:
        """Default: EMA of the teacher from the student (parameters the teacher has)."""
        ema_update(self.teacher, self.student, step.momentum)

    def logged_schedules(self, step: StepInfo) -> dict[str, float]:
        """Scheduled values of this step that the training logs show beside lr, wd and momentum.
        Default: every ``StepSchedule`` the method holds, under its attribute name (the teacher
        temperatures: ``teacher_temp``, iBOT's ``teacher_patch_temp``, CrIBo's ``teacher_temp_obj``)."""
        return {name: value(step) for name, value in vars(self).items() if isinstance(value, StepSchedule)}

    def trainable_parameters(self) -> Iterator[tuple[str, nn.Parameter]]:
        return ((n, p) for n, p in self.student.named_parameters() if p.requires_grad)

    def is_last_layer(self, name: str) -> bool:
        """Parameters frozen during the first ``freeze_last_layer`` epochs (DINO/iBOT)."""
        return "last_layer" in name

    # ---- export ---------------------------------------------------------------
    def export_backbone(self) -> dict[str, torch.Tensor]:
        """Teacher backbone weights with timm names: what evaluation uses."""
        return {k: v.detach().clone() for k, v in self.teacher.backbone.backbone_state_dict().items()}

    def setup_teacher(self) -> None:
        """Teacher starts as a copy of the student and is never trained by gradients."""
        load_matching(self.teacher, self.student)
        for p in self.teacher.parameters():
            p.requires_grad_(False)


@torch.no_grad()
def load_matching(dst: nn.Module, src: nn.Module) -> None:
    """Copy every tensor of ``dst``'s state that ``src`` also has (by name)."""
    src_state = src.state_dict()
    dst.load_state_dict({k: src_state[k] if k in src_state else v for k, v in dst.state_dict().items()})


@torch.no_grad()
def ema_update(teacher: nn.Module, student: nn.Module, momentum: float) -> None:
    """teacher = m * teacher + (1 - m) * student, over the parameters the teacher has
    (the student's extra parameters, such as iBOT's mask token, are skipped)."""
    student_params = dict(student.named_parameters())
    for name, t in teacher.named_parameters():
        s = student_params.get(name)
        if s is not None:
            t.mul_(momentum).add_(s.detach(), alpha=1.0 - momentum)
