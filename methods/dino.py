"""DINO (Caron et al., ICCV 2021), the self-distillation baseline.

What is new in DINO and lives here: the loss (cross-entropy between the centred,
sharpened teacher distribution on each global crop and the student distribution on
every other crop) and the way student and teacher see the crops. Its pieces that iBOT,
CrIBo and SynCLR reuse -- the head, centring, the multi-crop cross-entropy, the teacher
temperature, multi-crop -- are in methods/shared.py; schedules and EMA in harness/method.py
and harness/schedules.py.
Reference: facebookresearch/dino main_dino.py (DINOLoss, train_one_epoch).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import nn

from harness.method import BackboneConfig, Method, StepInfo
from harness.registry import register_method
from methods.shared import (Centering, DINOHead, MultiCropAugmentation, MultiCropConfig, MultiCropDataset,
                            TeacherTemperature, check_crop_sizes, collate_crops, forward_by_resolution,
                            list_pretrain_images, multicrop_cross_entropy)


@dataclass
class DINOConfig:
    out_dim: int = 65536
    hidden_dim: int = 2048
    bottleneck_dim: int = 256
    use_bn_in_head: bool = False
    norm_last_layer: bool = True
    warmup_teacher_temp: float = 0.04
    teacher_temp: float = 0.04
    warmup_teacher_temp_epochs: int = 0
    student_temp: float = 0.1
    center_momentum: float = 0.9
    crops: MultiCropConfig = field(default_factory=MultiCropConfig)

    def __post_init__(self):
        if self.out_dim < 1 or self.bottleneck_dim < 1 or self.hidden_dim < 1:
            raise ValueError("out_dim, hidden_dim and bottleneck_dim must be positive")
        if min(self.teacher_temp, self.warmup_teacher_temp, self.student_temp) <= 0:
            raise ValueError("temperatures must be positive")


class DINOLoss(nn.Module):
    """``main_dino.DINOLoss``: mean over (teacher global i, student crop v != i) pairs;
    the centre is updated from the teacher outputs after the loss (all-reduced)."""

    def __init__(self, out_dim: int, n_crops: int, n_global: int, student_temp: float = 0.1,
                 center_momentum: float = 0.9):
        super().__init__()
        self.n_crops, self.n_global, self.student_temp = n_crops, n_global, student_temp
        self.centering = Centering(out_dim, center_momentum)

    def forward(self, student_output: torch.Tensor, teacher_output: torch.Tensor, temp: float) -> torch.Tensor:
        probs = self.centering.softmax(teacher_output, temp)
        loss = multicrop_cross_entropy(student_output, probs, self.n_crops, self.n_global, self.student_temp)
        self.centering.update(teacher_output)
        return loss


@register_method("dino")
class DINO(Method):
    Config = DINOConfig

    def __init__(self, cfg: DINOConfig, backbone_cfg: BackboneConfig):
        super().__init__(cfg, backbone_cfg)
        student_bb = backbone_cfg.build(student=True)
        teacher_bb = backbone_cfg.build(student=False)
        check_crop_sizes(cfg.crops, student_bb.patch_size)
        head_kwargs = dict(hidden_dim=cfg.hidden_dim, bottleneck_dim=cfg.bottleneck_dim, use_bn=cfg.use_bn_in_head)
        student_head = DINOHead(student_bb.embed_dim, cfg.out_dim, norm_last_layer=cfg.norm_last_layer, **head_kwargs)
        teacher_head = DINOHead(teacher_bb.embed_dim, cfg.out_dim, **head_kwargs)
        self.student = nn.ModuleDict({"backbone": student_bb, "head": student_head})
        self.teacher = nn.ModuleDict({"backbone": teacher_bb, "head": teacher_head})
        self.setup_teacher()
        self.loss = DINOLoss(cfg.out_dim, cfg.crops.n_crops, cfg.crops.global_crops_number,
                             cfg.student_temp, cfg.center_momentum)
        self.teacher_temp = TeacherTemperature(cfg.warmup_teacher_temp, cfg.teacher_temp,
                                               cfg.warmup_teacher_temp_epochs)

    # ---- data ---------------------------------------------------------------
    def build_dataset(self, data_root: Path, seed: int) -> MultiCropDataset:
        return MultiCropDataset(list_pretrain_images(data_root), MultiCropAugmentation(self.cfg.crops), seed)

    def collate(self, samples: list) -> list[torch.Tensor]:
        return collate_crops(samples)

    # ---- optimisation ---------------------------------------------------------
    def training_step(self, batch: list[torch.Tensor], step: StepInfo) -> dict[str, torch.Tensor]:
        n_global = self.cfg.crops.global_crops_number
        if len(batch) != self.cfg.crops.n_crops:
            raise ValueError(f"expected {self.cfg.crops.n_crops} crops per image, found {len(batch)}")
        with torch.no_grad():  # only the global views pass through the teacher
            teacher_output = self.teacher.head(forward_by_resolution(self.teacher.backbone, batch[:n_global],
                                                                     cls_only=True))
        student_output = self.student.head(forward_by_resolution(self.student.backbone, batch, cls_only=True))
        loss = self.loss(student_output, teacher_output, self.teacher_temp(step))
        return {"loss": loss}
