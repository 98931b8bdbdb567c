"""iBOT (Zhou et al., ICLR 2022): DINO on [CLS] plus masked image modelling with an
online tokenizer (the EMA teacher's patch distributions).

New here: the iBOT head (the DINO head applied to every token, with a patch last layer
that may be shared), the loss (cross-view [CLS] term + in-view masked-patch term, separate
centres) and the data (blockwise masks per global crop). Reference: bytedance/ibot
main_ibot.py (iBOTLoss, train_one_epoch), models/head.py, loader.py.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from harness.errors import ConfigError
from harness.method import BackboneConfig, Method, StepInfo
from harness.registry import register_method
from methods.shared import (BlockMaskGenerator, Centering, DINOHead, MultiCropAugmentation, MultiCropConfig,
                            MultiCropDataset, TeacherTemperature, WeightNormLinear, check_crop_sizes, collate_crops,
                            forward_by_resolution, list_pretrain_images, multicrop_cross_entropy)


def _ibot_crops() -> MultiCropConfig:
    # README ViT-S/16 recipe: global (0.25, 1), 10 local crops of 96 px in (0.05, 0.25)
    return MultiCropConfig(global_crops_scale=(0.25, 1.0), local_crops_number=10, local_crops_scale=(0.05, 0.25))


@dataclass
class iBOTConfig:
    out_dim: int = 8192
    patch_out_dim: int = 8192  # used only when neither head is shared
    hidden_dim: int = 2048
    bottleneck_dim: int = 256
    use_bn_in_head: bool = False  # iBOT's --norm_in_head bn (one BatchNorm shared by the hidden layers)
    # Opt-in departure: BatchNorm batch statistics from the [CLS] rows and the patch rows
    # separately (officially one set over every token), so the [CLS] path is DINO's BN head.
    head_bn_per_token_type: bool = False
    norm_last_layer: bool = True
    shared_head: bool = True  # student: one last layer for [CLS] and patches (README recipe)
    shared_head_teacher: bool = True
    warmup_teacher_temp: float = 0.04
    teacher_temp: float = 0.07
    warmup_teacher_patch_temp: float = 0.04
    teacher_patch_temp: float = 0.07
    warmup_teacher_temp_epochs: int = 30
    student_temp: float = 0.1
    center_momentum: float = 0.9
    center_momentum_patch: float = 0.9
    lambda1: float = 1.0  # [CLS] loss weight
    lambda2: float = 1.0  # MIM loss weight
    use_masked_im_modeling: bool = True
    # random MIM: ratio 0 with p 1/2, else U(0.1, 0.5)
    pred_ratio: float | list[float] = field(default_factory=lambda: [0.0, 0.3])
    pred_ratio_var: float | list[float] = field(default_factory=lambda: [0.0, 0.2])
    pred_aspect_ratio: tuple[float, float] = (0.3, 1 / 0.3)
    pred_shape: str = "block"
    pred_start_epoch: int = 0
    crops: MultiCropConfig = field(default_factory=_ibot_crops)

    def __post_init__(self):
        if self.head_bn_per_token_type and not self.use_bn_in_head:
            raise ValueError("head_bn_per_token_type needs use_bn_in_head: true")
        BlockMaskGenerator(self.pred_ratio, self.pred_ratio_var, self.pred_aspect_ratio, self.pred_shape)
        if min(self.teacher_temp, self.warmup_teacher_temp, self.teacher_patch_temp,
               self.warmup_teacher_patch_temp, self.student_temp) <= 0:
            raise ValueError("temperatures must be positive")

    @property
    def patch_dim(self) -> int:
        """Patch output size: ``out_dim`` as soon as either head is shared (iBOT's ``same_dim``)."""
        return self.out_dim if (self.shared_head or self.shared_head_teacher) else self.patch_out_dim


class iBOTHead(DINOHead):
    """DINO head over all tokens: [CLS] -> ``last_layer``, patches -> ``last_layer2``
    (the same module when shared, as in the official state dict). A 2-D input is a
    batch of [CLS] tokens and gives the [CLS] output only."""

    def __init__(self, in_dim: int, out_dim: int, patch_out_dim: int, shared_head: bool, hidden_dim: int = 2048,
                 bottleneck_dim: int = 256, nlayers: int = 3, use_bn: bool = False, norm_last_layer: bool = True,
                 bn_per_token_type: bool = False):
        super().__init__(in_dim, out_dim, hidden_dim=hidden_dim, bottleneck_dim=bottleneck_dim, nlayers=nlayers,
                         use_bn=use_bn, norm_last_layer=norm_last_layer)
        if use_bn and nlayers > 2:
            # Quirk of models/head.py: `_build_norm` makes one BatchNorm and appends that same
            # module after every hidden linear layer, so they share weights and statistics.
            bns = [i for i, m in enumerate(self.mlp) if isinstance(m, nn.BatchNorm1d)]
            for i in bns[1:]:
                self.mlp[i] = self.mlp[bns[0]]
        if shared_head:
            self.last_layer2 = self.last_layer
        else:
            self.last_layer2 = WeightNormLinear(bottleneck_dim, patch_out_dim, fix_norm=norm_last_layer)
        self.bn_per_token_type = bn_per_token_type

    def forward(self, x: torch.Tensor):
        if x.ndim == 2:
            return super().forward(x)
        if self.bn_per_token_type:
            return self.last_layer(self.bottleneck(x[:, 0])), self.last_layer2(self.bottleneck(x[:, 1:]))
        z = self.bottleneck(x)
        return self.last_layer(z[:, 0]), self.last_layer2(z[:, 1:])


class iBOTLoss(nn.Module):
    """``main_ibot.iBOTLoss``. [CLS]: mean over (teacher global q, student crop v != q)
    pairs, x lambda1. MIM: per global view, per image the cross-entropy summed over masked
    tokens / max(1, #masked), mean over images, then mean over views, x lambda2.
    total = both. Centres (momentum 0.9 each) are updated after the loss from the teacher
    outputs; the patch centre from every patch token."""

    def __init__(self, out_dim: int, patch_out_dim: int, n_global: int, n_local: int, student_temp: float = 0.1,
                 center_momentum: float = 0.9, center_momentum_patch: float = 0.9, lambda1: float = 1.0,
                 lambda2: float = 1.0):
        super().__init__()
        self.n_global, self.n_local, self.student_temp = n_global, n_local, student_temp
        self.lambda1, self.lambda2 = lambda1, lambda2
        self.center = Centering(out_dim, center_momentum)
        self.center_patch = Centering(patch_out_dim, center_momentum_patch, tokens=True)

    def forward(self, student_cls: torch.Tensor, student_patch: torch.Tensor, student_local_cls: torch.Tensor | None,
                teacher_cls: torch.Tensor, teacher_patch: torch.Tensor, masks: list[torch.Tensor], temp: float,
                temp_patch: float) -> dict[str, torch.Tensor]:
        if student_local_cls is not None:
            student_cls = torch.cat([student_cls, student_local_cls])
        n_crops = self.n_global + (0 if student_local_cls is None else self.n_local)
        cls_loss = multicrop_cross_entropy(student_cls, self.center.softmax(teacher_cls, temp), n_crops,
                                           self.n_global, self.student_temp) * self.lambda1
        s_patch = (student_patch / self.student_temp).chunk(self.n_global)
        t_patch = self.center_patch.softmax(teacher_patch, temp_patch).detach().chunk(self.n_global)
        total = 0.0
        for q in range(self.n_global):
            ce = torch.sum(-t_patch[q] * F.log_softmax(s_patch[q], dim=-1), dim=-1)  # (B, N)
            mask = masks[q].flatten(-2, -1)
            total = total + (torch.sum(ce * mask.float(), dim=-1) / mask.sum(dim=-1).clamp(min=1.0)).mean()
        patch_loss = total / self.n_global * self.lambda2
        self.center.update(teacher_cls)
        self.center_patch.update(teacher_patch)
        return {"cls": cls_loss, "patch": patch_loss, "loss": cls_loss + patch_loss}


@register_method("ibot")
class iBOT(Method):
    Config = iBOTConfig

    def __init__(self, cfg: iBOTConfig, backbone_cfg: BackboneConfig):
        super().__init__(cfg, backbone_cfg)
        # iBOT's `masked_embed`, built only when masking is on (official: `masked_im_modeling`):
        # an unused parameter stops DistributedDataParallel at its second step
        student_bb = backbone_cfg.build(student=True, use_mask_token=cfg.use_masked_im_modeling)
        teacher_bb = backbone_cfg.build(student=False)
        check_crop_sizes(cfg.crops, student_bb.patch_size)
        if cfg.crops.global_crops_number + cfg.crops.local_crops_number < 2:
            raise ConfigError("iBOT needs at least two crops (the [CLS] loss pairs different views)")
        kw = dict(hidden_dim=cfg.hidden_dim, bottleneck_dim=cfg.bottleneck_dim, use_bn=cfg.use_bn_in_head,
                  bn_per_token_type=cfg.head_bn_per_token_type)
        student_head = iBOTHead(student_bb.embed_dim, cfg.out_dim, cfg.patch_out_dim, cfg.shared_head,
                                norm_last_layer=cfg.norm_last_layer, **kw)
        teacher_head = iBOTHead(teacher_bb.embed_dim, cfg.out_dim, cfg.patch_out_dim, cfg.shared_head_teacher, **kw)
        self.student = nn.ModuleDict({"backbone": student_bb, "head": student_head})
        self.teacher = nn.ModuleDict({"backbone": teacher_bb, "head": teacher_head})
        self.setup_teacher()  # official: teacher.load_state_dict(student.state_dict(), strict=False)
        self.loss = iBOTLoss(cfg.out_dim, cfg.patch_dim, cfg.crops.global_crops_number, cfg.crops.local_crops_number,
                             cfg.student_temp, cfg.center_momentum, cfg.center_momentum_patch, cfg.lambda1, cfg.lambda2)
        self.teacher_temp = TeacherTemperature(cfg.warmup_teacher_temp, cfg.teacher_temp,
                                               cfg.warmup_teacher_temp_epochs)
        self.teacher_patch_temp = TeacherTemperature(cfg.warmup_teacher_patch_temp, cfg.teacher_patch_temp,
                                                     cfg.warmup_teacher_temp_epochs, start_epoch=cfg.pred_start_epoch)
        self.mask_generator = BlockMaskGenerator(cfg.pred_ratio, cfg.pred_ratio_var, cfg.pred_aspect_ratio,
                                                 cfg.pred_shape, cfg.pred_start_epoch)
        self.patch_size = student_bb.patch_size

    # ---- data ---------------------------------------------------------------
    def _masks(self, crops: list[torch.Tensor], rng, epoch: int) -> dict:
        """One block mask per global crop (locals are never masked)."""
        n_global = self.cfg.crops.global_crops_number
        return {"masks": [torch.from_numpy(self.mask_generator(c.shape[-2] // self.patch_size,
                                                               c.shape[-1] // self.patch_size, rng, epoch))
                          for c in crops[:n_global]]}

    def build_dataset(self, data_root: Path, seed: int) -> MultiCropDataset:
        return MultiCropDataset(list_pretrain_images(data_root), MultiCropAugmentation(self.cfg.crops), seed,
                                extra=self._masks)

    def collate(self, samples: list) -> dict:
        return collate_crops(samples)

    # ---- optimisation ---------------------------------------------------------
    def training_step(self, batch: dict, step: StepInfo) -> dict[str, torch.Tensor]:
        crops, masks = batch["crops"], batch["masks"]
        g = self.cfg.crops.global_crops_number
        with torch.no_grad():  # the teacher sees the unmasked global crops
            teacher_cls, teacher_patch = self.teacher.head(forward_by_resolution(self.teacher.backbone, crops[:g]))
        student_masks = masks if self.cfg.use_masked_im_modeling else None
        student_cls, student_patch = self.student.head(
            forward_by_resolution(self.student.backbone, crops[:g], masks=student_masks))
        student_local_cls = None
        if len(crops) > g:  # local crops: no masking, [CLS] only
            if self.cfg.use_bn_in_head and not self.cfg.head_bn_per_token_type:
                # the official head sees every local token (BatchNorm statistics)
                student_local_cls = self.student.head(forward_by_resolution(self.student.backbone, crops[g:]))[0]
            else:  # same numbers, without projecting tokens that are thrown away
                student_local_cls = self.student.head(
                    forward_by_resolution(self.student.backbone, crops[g:], cls_only=True))
        return self.loss(student_cls, student_patch, student_local_cls, teacher_cls, teacher_patch, masks,
                         self.teacher_temp(step), self.teacher_patch_temp(step))
