"""SynCLR-style multi-positive contrastive learning (Tian et al., 2023) with iBOT masked
image modelling.

Batches are made of captions: every image generated from one caption is a positive for
the others. New here: the caption-group data (n captions x m images, 1 global + n local
crops per image), the MoCo-v3 projector / predictor, the multi-positive contrastive loss
against all-gathered EMA keys, and the iBOT patch loss with Sinkhorn-Knopp targets.
Reference: google-research/syn-rep-learn SynCLR/train_pytorch (synclr_meta_arch.py,
models/mask_losses.py SupConMomentumLoss + iBOTPatchLoss, models/head.py,
dataset/collate.py, dataset/augmentations.py); the paper's defaults where the PyTorch
reference differs (docs/METHODS.md lists both).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from harness.runtime import distributed as D
from harness.errors import ConfigError, DataError
from harness.method import BackboneConfig, Method, StepInfo
from harness.registry import register_method
from methods.shared import (BlockMaskGenerator, DINOHead, MultiCropAugmentation, MultiCropConfig, MultiCropDataset,
                            TeacherTemperature, check_crop_sizes, sample_rng, sinkhorn_knopp)


def _synclr_crops() -> MultiCropConfig:
    # main_mask_synclr.py defaults: 1 global crop (0.32, 1) whose recipe (blur 1.0, or blur 0.1 +
    # solarize 0.2) is picked at random per image; the paper's 4 local crops (0.08, 0.32), blur 0.5.
    return MultiCropConfig(global_crops_number=1, global_crops_scale=(0.32, 1.0), local_crops_number=4,
                           local_crops_scale=(0.08, 0.32), global_recipe_order="random")


@dataclass
class SynCLRConfig:
    images_per_caption: int = 4  # m (the official --n_img); train.batch_size counts images (n x m)
    contrast_mlp_dim: int = 4096
    contrast_output_dim: int = 256
    contrast_mlp_norm: str = "ln"  # ln | bn
    contrast_temperature: float = 0.08  # paper; the PyTorch reference default is 0.1
    # the reference's flag (off in its command): local anchor row r also leaves out key r mod (keys)
    avoid_local_global_same: bool = False
    # deliberate fix, opt-in: with the flag, leave out the local crop's own image's global crop instead
    fix_avoid_local_global_same: bool = False
    contrast_loss_weight: float = 1.0
    ibot_loss_weight: float = 1.0
    dino_mlp_dim: int = 2048
    dino_output_dim: int = 65536  # paper; the PyTorch reference README uses 8192
    dino_bottleneck_dim: int = 256
    dino_n_layers: int = 3
    warmup_teacher_temp: float = 0.04
    teacher_temp: float = 0.07
    warmup_teacher_temp_epochs: float = 1.0  # linear, per step (fractional epochs allowed)
    student_temp: float = 0.1
    sinkhorn_iterations: int = 3
    mask_probability: float = 0.5  # the first int(p x global crops) of the batch are masked
    mask_ratio: float | list[float] = 0.5  # one ratio, or [low, high] spread over the masked crops
    mask_shape: str = "rand"
    crops: MultiCropConfig = field(default_factory=_synclr_crops)

    def __post_init__(self):
        if self.images_per_caption < 1:
            raise ValueError(f"images_per_caption must be >= 1, found {self.images_per_caption}")
        if self.images_per_caption * self.crops.global_crops_number < 2:
            raise ValueError("a global crop needs another same-caption key: use images_per_caption >= 2 "
                             "(or 2 global crops)")
        if self.fix_avoid_local_global_same and not self.avoid_local_global_same:
            raise ValueError("fix_avoid_local_global_same changes which key avoid_local_global_same leaves "
                             "out; set avoid_local_global_same: true as well (or drop the fix)")
        if self.contrast_mlp_norm not in ("ln", "bn"):
            raise ValueError(f"contrast_mlp_norm must be 'ln' or 'bn', found {self.contrast_mlp_norm!r}")
        if self.mask_shape != "rand":
            raise ValueError(f"mask_shape {self.mask_shape!r} is not implemented; use 'rand' (the reference "
                             f"training command's choice)")
        if not 0.0 <= self.mask_probability <= 1.0:
            raise ValueError(f"mask_probability must be in [0, 1], found {self.mask_probability}")
        ratio = self.mask_ratio if isinstance(self.mask_ratio, list) else [self.mask_ratio]
        if len(ratio) not in (1, 2) or not all(0.0 <= r <= 1.0 for r in ratio):
            raise ValueError(f"mask_ratio must be a ratio or [low, high] in [0, 1], found {self.mask_ratio}")
        if min(self.contrast_temperature, self.teacher_temp, self.warmup_teacher_temp, self.student_temp) <= 0:
            raise ValueError("temperatures must be positive")


# ============================================================================ heads
class MLPHead(nn.Module):
    """MoCo-v3 style MLP (SynCLR ``models/head.MLPHead``).

    ``ln``: [Linear(bias) -> LayerNorm -> GELU] x (n - 1) -> Linear(no bias) -> LayerNorm(no affine).
    ``bn``: [Linear(no bias) -> BatchNorm -> ReLU] x (n - 1) -> Linear(no bias) -> BatchNorm(no affine).
    """

    def __init__(self, num_layers: int, input_dim: int, mlp_dim: int, output_dim: int, norm: str = "ln",
                 last_norm: bool = True):
        super().__init__()
        layers: list[nn.Module] = []
        for i in range(num_layers):
            d1 = input_dim if i == 0 else mlp_dim
            d2 = output_dim if i == num_layers - 1 else mlp_dim
            last = i == num_layers - 1
            if norm == "bn":
                layers.append(nn.Linear(d1, d2, bias=False))
                if not last:
                    layers += [nn.BatchNorm1d(d2), nn.ReLU(inplace=True)]
                elif last_norm:
                    layers.append(nn.BatchNorm1d(d2, affine=False))
            else:
                layers.append(nn.Linear(d1, d2, bias=not last))
                if not last:
                    layers += [nn.LayerNorm(d2), nn.GELU()]
                elif last_norm:
                    layers.append(nn.LayerNorm(d2, elementwise_affine=False))
        self.mlp = nn.Sequential(*layers)
        for m in self.modules():
            if isinstance(m, nn.Linear):
                nn.init.trunc_normal_(m.weight, std=0.02)
                if m.bias is not None:
                    nn.init.constant_(m.bias, 0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.mlp(x)


# ============================================================================ losses
def multi_positive_contrastive(q: torch.Tensor, k: torch.Tensor, q_labels: torch.Tensor, k_labels: torch.Tensor,
                               q_exclude: torch.Tensor, n_global_rows: int, temperature: float
                               ) -> dict[str, torch.Tensor]:
    """SynCLR's ``SupConMomentumLoss``: H(p, q) with q = softmax(a . b / tau) over every
    all-gathered EMA key b except the anchor's excluded key (numerator and denominator),
    p uniform over same-caption keys.

    ``q``: student anchors (globals first, then locals); ``k``: this rank's EMA keys;
    ``q_exclude``: per anchor, the index into this rank's keys to leave out (-1: none).
    Returns the mean over global anchors, over local anchors, and their sum.
    The official code caches the positive mask by batch size; here it is built from the
    labels every step (identical when, as there, every batch has the same caption layout).
    """
    q = F.normalize(q, dim=1)
    k = F.normalize(k, dim=1)
    all_k = D.all_gather_cat(k)
    all_labels = D.all_gather_cat(k_labels)
    mask = torch.eq(q_labels.view(-1, 1), all_labels.view(1, -1)).float()
    logits_mask = torch.ones_like(mask)
    rows = torch.nonzero(q_exclude >= 0).flatten()
    logits_mask[rows, q_exclude[rows] + k.shape[0] * D.rank()] = 0
    mask = mask * logits_mask
    logits = torch.matmul(q, all_k.T) / temperature
    logits = logits - torch.max(logits, dim=1, keepdim=True)[0].detach()
    exp_logits = torch.exp(logits) * logits_mask
    log_prob = logits - torch.log(exp_logits.sum(1, keepdim=True))
    mean_log_prob_pos = (mask * log_prob).sum(1) / mask.sum(1)
    global_loss = -mean_log_prob_pos[:n_global_rows].mean()
    local_loss = -mean_log_prob_pos[n_global_rows:].mean() if q.shape[0] > n_global_rows else q.new_zeros(())
    return {"contrast_global": global_loss, "contrast_local": local_loss, "contrast": global_loss + local_loss}


def masked_patch_loss(student_logits: torch.Tensor, teacher_targets: torch.Tensor, masks_flat: torch.Tensor,
                      n_masked_samples: int, student_temp: float = 0.1) -> torch.Tensor:
    """SynCLR's ``iBOTPatchLoss.forward_masked``: cross-entropy per masked token (rows in
    ``masks_flat.nonzero()`` order), weighted by 1 / (masked tokens of its image), summed,
    divided by the number of masked images (not by the batch)."""
    ce = torch.sum(teacher_targets * F.log_softmax(student_logits / student_temp, dim=-1), dim=-1)
    weight = (1 / masks_flat.sum(-1).clamp(min=1.0)).unsqueeze(-1).expand_as(masks_flat)[masks_flat]
    return -(ce * weight).sum() / n_masked_samples


# ============================================================================ data
class CaptionImageDataset(MultiCropDataset):
    """The images of every caption group (with at least ``images_per_caption`` images),
    each cut into 1 global + n local crops and labelled with its group's position.
    :meth:`SynCLR.global_batches` draws n captions x m images per batch; augmentations
    are deterministic per (seed, epoch, index)."""

    def __init__(self, groups: list[tuple[Path, ...]], augmentation: MultiCropAugmentation, seed: int,
                 loader=None):
        super().__init__([p for g in groups for p in g], augmentation, seed, loader=loader)
        self.labels = [i for i, g in enumerate(groups) for _ in g]
        self.members: list[list[int]] = []  # dataset indices of each group's images
        start = 0
        for g in groups:
            self.members.append(list(range(start, start + len(g))))
            start += len(g)

    def __getitem__(self, index: int) -> dict:
        rng = sample_rng(self.seed, self.epoch, index)
        crops = self.augmentation(self.loader(self.paths[index]), rng)
        n_global = self.augmentation.cfg.global_crops_number
        return {"global": crops[:n_global], "local": crops[n_global:], "label": self.labels[index],
                "mask_seed": int(rng.integers(0, 2**62))}


def caption_groups(data_root: Path, min_images: int) -> list[tuple[Path, ...]]:
    """Image paths of every caption group with at least ``min_images`` images."""
    from harness.data.captions import CaptionGroups

    root = Path(data_root)
    reader = CaptionGroups(root / "captions" if (root / "captions").is_dir() else root)
    groups = [tuple(g.image_paths) for g in reader.groups if len(g.image_paths) >= min_images]
    if not groups:
        raise DataError(f"{reader.path}: no caption group has {min_images} images (images_per_caption); "
                        f"lower images_per_caption or generate more renders per caption")
    return groups


def caption_batches(members: list[list[int]], images_per_caption: int, batch_size: int, seed: int, epoch: int,
                    world_size: int = 1) -> list[list[int]]:
    """Global batches of ``batch_size // m`` captions x ``m`` images (drop last), caption-major:
    captions in a permutation seeded by (seed, epoch), each caption's m images drawn without
    replacement (the official dataset samples ``n_img`` renders per caption)."""
    m = images_per_caption
    if batch_size % (m * world_size):
        raise ConfigError(f"train.batch_size {batch_size} must be a multiple of images_per_caption ({m}) x "
                          f"processes ({world_size}) so that every process holds whole captions")
    n = batch_size // m
    if len(members) < n:
        raise DataError(f"{len(members)} caption groups cannot fill one batch of {n} captions; lower "
                        f"train.batch_size or use more caption groups")
    rng = np.random.default_rng([int(seed), int(epoch), 0x5C1])
    order = rng.permutation(len(members))
    batches = []
    for b in range(len(order) // n):
        batch = []
        for g in order[b * n:(b + 1) * n]:
            pick = rng.choice(len(members[g]), m, replace=False)
            batch += [members[g][int(i)] for i in pick]
        batches.append(batch)
    return batches


def reference_local_exclude(n_keys: int, n_local_rows: int) -> torch.Tensor:
    """For each local anchor, the key the reference's ``avoid_local_global_same`` leaves out
    (``SupConMomentumLoss``: exclude index ``arange(keys)`` repeated ``anchors // keys`` times,
    scattered row by row): anchor row R (globals first) loses key ``R mod keys``, i.e. local
    row r loses key ``r mod keys``; anchor rows past ``(anchors // keys) * keys`` lose none
    (-1). With one global crop per image, that key is the crop's own image's global crop only
    when there is one local crop per image or one image per caption; otherwise another
    same-caption image's."""
    n_anchors = n_keys + n_local_rows
    rows = torch.arange(n_keys, n_anchors)
    return torch.where(rows < (n_anchors // n_keys) * n_keys, rows % n_keys, torch.full_like(rows, -1))


def local_own_keys(n_captions: int, images_per_caption: int, n_global: int, n_local: int) -> torch.Tensor:
    """For each local crop in collate order, the index of its own image's first global crop
    among the keys: what ``fix_avoid_local_global_same`` leaves out, the flag's stated intent
    ("avoid local and global crops to be from the same image"); see
    :func:`reference_local_exclude` for what the reference leaves out."""
    rows = [(p // n_local) * n_global * n_captions + s
            for p in range(images_per_caption * n_local) for s in range(n_captions)]
    return torch.tensor(rows, dtype=torch.long)


# ============================================================================ method
@register_method("synclr")
class SynCLR(Method):
    Config = SynCLRConfig
    # the mask token gets no gradient in a step whose batch (on a rank) has no masked crop
    ddp_find_unused_parameters = True

    def __init__(self, cfg: SynCLRConfig, backbone_cfg: BackboneConfig):
        super().__init__(cfg, backbone_cfg)
        student_bb = backbone_cfg.build(student=True, use_mask_token=True)
        teacher_bb = backbone_cfg.build(student=False)
        nn.init.normal_(student_bb.mask_token, std=0.02)  # MaskedTransformer's mask_token init
        check_crop_sizes(cfg.crops, student_bb.patch_size)
        d = student_bb.embed_dim
        proj = dict(num_layers=3, input_dim=d, mlp_dim=cfg.contrast_mlp_dim, output_dim=cfg.contrast_output_dim,
                    norm=cfg.contrast_mlp_norm)
        pred = dict(num_layers=2, input_dim=cfg.contrast_output_dim, mlp_dim=cfg.contrast_mlp_dim,
                    output_dim=cfg.contrast_output_dim, norm=cfg.contrast_mlp_norm)
        # SynCLR's DINO head has no norm_last_layer option: weight_g is trained
        dino = dict(in_dim=d, out_dim=cfg.dino_output_dim, hidden_dim=cfg.dino_mlp_dim,
                    bottleneck_dim=cfg.dino_bottleneck_dim, nlayers=cfg.dino_n_layers, norm_last_layer=False)
        self.student = nn.ModuleDict({"backbone": student_bb, "proj": MLPHead(**proj), "pred": MLPHead(**pred),
                                      "dino_head": DINOHead(**dino)})
        self.teacher = nn.ModuleDict({"backbone": teacher_bb, "proj": MLPHead(**proj), "dino_head": DINOHead(**dino)})
        self.setup_teacher()
        self.teacher_temp = TeacherTemperature(cfg.warmup_teacher_temp, cfg.teacher_temp,
                                               cfg.warmup_teacher_temp_epochs, per_step=True)
        self.patch_size = student_bb.patch_size
        self.mask_generator = BlockMaskGenerator(0.0, pred_shape="rand")

    def is_last_layer(self, name: str) -> bool:
        return "dino_head.last_layer" in name

    # ---- data ---------------------------------------------------------------
    def build_dataset(self, data_root: Path, seed: int) -> CaptionImageDataset:
        return CaptionImageDataset(caption_groups(data_root, self.cfg.images_per_caption),
                                   MultiCropAugmentation(self.cfg.crops), seed)

    def global_batches(self, dataset: CaptionImageDataset, epoch: int, batch_size: int, seed: int) -> list[list[int]]:
        """The engine's batch sampler hook: n captions x m images per global batch."""
        return caption_batches(dataset.members, self.cfg.images_per_caption, batch_size, seed, epoch,
                               D.world_size())

    def collate(self, samples: list[dict]) -> dict:
        """Official ``collate_data_and_cast`` layout: crop position major (image v of every
        caption, then image v + 1, ...), caption minor; the first int(mask_probability x
        global crops) global crops get random masks."""
        cfg = self.cfg
        by_caption: dict[int, list[dict]] = {}
        for s in samples:
            by_caption.setdefault(s["label"], []).append(s)
        captions = list(by_caption.values())
        m = len(captions[0])
        if any(len(c) != m for c in captions):
            raise ValueError(f"a SynCLR batch needs the same number of images per caption, found "
                             f"{sorted(len(c) for c in captions)}")
        n_g, n_l, bs = len(samples[0]["global"]), len(samples[0]["local"]), len(captions)
        labels = torch.tensor([c[0]["label"] for c in captions], dtype=torch.long)
        global_crops = torch.stack([c[p // n_g]["global"][p % n_g] for p in range(m * n_g) for c in captions])
        out = {"global": global_crops, "global_labels": labels.repeat(m * n_g),
               "local": (torch.stack([c[p // n_l]["local"][p % n_l] for p in range(m * n_l) for c in captions])
                         if n_l else None),
               "local_labels": labels.repeat(m * n_l),
               "local_own_key": local_own_keys(bs, m, n_g, n_l)}
        # masks from a batch RNG seeded by the samples' own RNGs (deterministic, order-aware)
        rng = np.random.default_rng([s["mask_seed"] for s in samples])
        b = global_crops.shape[0]
        h, w = global_crops.shape[-2] // self.patch_size, global_crops.shape[-1] // self.patch_size
        n_masked = int(b * cfg.mask_probability)
        ratios = cfg.mask_ratio if isinstance(cfg.mask_ratio, list) else [cfg.mask_ratio]
        masks = np.zeros((b, h, w), dtype=bool)
        if len(ratios) == 2:  # official: ratio of mask i uniform in the i-th of n_masked equal bins
            bounds = torch.linspace(ratios[0], ratios[1], n_masked + 1).tolist()
            for i in range(n_masked):
                r = bounds[i] + (bounds[i + 1] - bounds[i]) * rng.random()
                masks[i] = self.mask_generator.mask_for_ratio(h, w, r, rng)
        else:
            for i in range(n_masked):
                masks[i] = self.mask_generator.mask_for_ratio(h, w, ratios[0], rng)
        out["masks"] = torch.from_numpy(masks)
        out["n_masked_crops"] = n_masked
        return out

    # ---- optimisation ---------------------------------------------------------
    def training_step(self, batch: dict, step: StepInfo) -> dict[str, torch.Tensor]:
        cfg = self.cfg
        g, masks = batch["global"], batch["masks"]
        masks_flat = masks.flatten(1)
        idx = masks_flat.flatten().nonzero().flatten()
        # decided from every rank's count: sinkhorn_knopp all-reduces, so a rank without masked
        # tokens must still join it (else the others wait for it forever)
        n_masked = D.all_reduce_sum(torch.tensor([idx.numel()], device=masks_flat.device))
        do_ibot = cfg.ibot_loss_weight > 0 and int(n_masked.item()) > 0
        with torch.no_grad():
            t_tokens = self.teacher.backbone(g)
            keys = self.teacher.proj(t_tokens[:, 0])
            if do_ibot:
                t_logits = self.teacher.dino_head(t_tokens[:, 1:].flatten(0, 1)[idx])
                targets = sinkhorn_knopp(t_logits, self.teacher_temp(step), cfg.sinkhorn_iterations,
                                         n_samples=idx.numel())
        s_tokens = self.student.backbone(g, mask=masks)
        s_cls = [s_tokens[:, 0]]
        local = batch.get("local")
        if local is not None and len(local):  # local crops: never masked, [CLS] only
            s_cls.append(self.student.backbone(local)[:, 0])
        anchors = self.student.pred(self.student.proj(torch.cat(s_cls)))
        n_global_rows = g.shape[0]
        dev = anchors.device  # the loss indexes the anchors' logits with these: same device
        q_labels = torch.cat([batch["global_labels"], batch["local_labels"]])
        n_local_rows = anchors.shape[0] - n_global_rows
        if cfg.avoid_local_global_same and cfg.fix_avoid_local_global_same:
            own_local = batch["local_own_key"].to(dev)
        elif cfg.avoid_local_global_same:  # the reference's rule
            own_local = reference_local_exclude(keys.shape[0], n_local_rows).to(dev)
        else:
            own_local = torch.full((n_local_rows,), -1, dtype=torch.long, device=dev)
        exclude = torch.cat([torch.arange(n_global_rows, device=dev), own_local])  # a global anchor's own EMA crop
        out = multi_positive_contrastive(anchors, keys, q_labels.to(dev), batch["global_labels"].to(keys.device),
                                         exclude, n_global_rows, cfg.contrast_temperature)
        if do_ibot:
            s_logits = self.student.dino_head(s_tokens[:, 1:].flatten(0, 1)[idx])
            if idx.numel() > 0:
                ibot = masked_patch_loss(s_logits, targets, masks_flat, batch["n_masked_crops"], cfg.student_temp)
                ibot = ibot / cfg.crops.global_crops_number
            else:  # other ranks masked tokens, this one none: a zero that keeps the head's graph
                ibot = s_logits.float().sum() * 0.0
        else:
            ibot = s_tokens.new_zeros(())
        out["ibot"] = ibot
        out["loss"] = out["contrast"] * cfg.contrast_loss_weight + ibot * cfg.ibot_loss_weight
        return out
