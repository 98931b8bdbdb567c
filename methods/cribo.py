"""CrIBo: cross-image object-level bootstrapping (Lebailly, Stegmüller et al., ICLR 2024).

What is new in CrIBo and lives here: two global crops that carry the original-image
coordinates of their patches; a joint clustering of both views' teacher tokens into
objects (Sinkhorn-Knopp on a semantic + positional cost); object representations
for teacher and student from the teacher's assignment; memory banks of teacher
object representations with nearest-neighbour retrieval and a cycle-consistency
check; and the three losses (global cross-view DINO on [CLS], object cross-view,
object cross-image). The head MLP, centring, crops, schedules and EMA are shared
(methods/shared.py, harness/method.py).

Reference: tileb1/CrIBo main_cribo.py (Clustering, get_nn_centroids, CrIBoLoss,
train_one_epoch) and cribo_utils/data_transforms.py. The official behaviour is the
default, quirks included; each deliberate fix is an opt-in setting of its own
(``fix_cross_image_normalisation``, ``fix_cycle_check_all_ranks``); docs/METHODS.md (CrIBo
section) lists every difference, every quirk kept and each fix's measured effect.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from harness.runtime import distributed as D
from harness.errors import ConfigError
from harness.method import BackboneConfig, Method, StepInfo
from harness.registry import register_method
from methods.shared import (Centering, DINOHead, MultiCropAugmentation, MultiCropConfig, MultiCropDataset,
                            TeacherTemperature, WeightNormLinear, check_crop_sizes, collate_crops,
                            list_pretrain_images, multicrop_cross_entropy, sample_rng)


# ============================================================================ config
@dataclass
class CrIBoCropConfig(MultiCropConfig):
    """CrIBo's augmentation: DINO's two global recipes, no local crops (main_cribo.py
    ``DataAugmentationCrIBo``; released args: global scale (0.25, 1), no multi-crop)."""

    global_crops_scale: tuple[float, float] = (0.25, 1.0)
    local_crops_number: int = 0


@dataclass
class CrIBoConfig:
    # heads: one MLP shared by the [CLS] and object projections, two last layers
    out_dim: int = 65536
    out_dim_obj: int = 65536  # official --out_dim_c
    hidden_dim: int = 2048
    bottleneck_dim: int = 256
    use_bn_in_head: bool = False
    norm_last_layer: bool = False  # released ViT-S args; ViT-B uses true
    # clustering
    n_clusters: int = 32  # K (official --n_tokens)
    lambda_pos: float = 1.0  # official --pos_alpha
    cluster_iters: int = 5  # official --n_iter
    sinkhorn_lambda: float = 20.0
    sinkhorn_iters: int = 5
    update_marginals: bool = True  # official --update_c (default and released: true)
    cost_minmax: Literal["batch", "image"] = "batch"
    # memory bank
    queue_size: int = 25000  # S, in images
    cross_image_start_epoch: int = 1  # official: `if epoch >= 1`
    # temperatures and centring
    warmup_teacher_temp: float = 0.04
    teacher_temp: float = 0.07
    warmup_teacher_temp_obj: float = 0.04
    teacher_temp_obj: float = 0.07
    warmup_teacher_temp_epochs: int = 30
    student_temp: float = 0.1
    student_temp_obj: float = 0.1
    center_momentum: float = 0.9
    center_momentum_obj: float = 0.9
    # deliberate fixes of two official slips, off by default (docs/METHODS.md, CrIBo, "Deliberate fixes")
    fix_cross_image_normalisation: bool = False  # each direction of L_ci over its own valid pairs
    fix_cycle_check_all_ranks: bool = False  # cycle check against every rank's objects, not this rank's
    crops: CrIBoCropConfig = field(default_factory=CrIBoCropConfig)

    def __post_init__(self):
        if self.crops.global_recipe_order != "fixed":
            raise ValueError(f"CrIBo's first global crop takes recipe 1 and the second recipe 2; found "
                             f"crops.global_recipe_order={self.crops.global_recipe_order!r}, set it to 'fixed'")
        if self.crops.global_crops_number != 2 or self.crops.local_crops_number != 0:
            raise ValueError(f"CrIBo uses exactly two global crops and no local crops; found "
                             f"crops.global_crops_number={self.crops.global_crops_number}, "
                             f"crops.local_crops_number={self.crops.local_crops_number}")
        if self.n_clusters < 1 or self.queue_size < 1:
            raise ValueError(f"n_clusters and queue_size must be >= 1, found {self.n_clusters}, "
                             f"{self.queue_size}")
        if min(self.teacher_temp, self.warmup_teacher_temp, self.teacher_temp_obj,
               self.warmup_teacher_temp_obj, self.student_temp, self.student_temp_obj) <= 0:
            raise ValueError("temperatures must be positive")
        if self.cost_minmax not in ("batch", "image"):
            raise ValueError(f"cost_minmax must be 'batch' or 'image', found {self.cost_minmax!r}")
        if self.cluster_iters < 1 or self.sinkhorn_iters < 1:
            raise ValueError("cluster_iters and sinkhorn_iters must be >= 1")


# ============================================================================ data
def patch_coords(top: int, left: int, height: int, width: int, grid: int, flipped: bool) -> torch.Tensor:
    """Original-image pixel coordinates (x, y) of the patch centres of a resized crop, (grid*grid, 2).

    The official code resizes a map of pixel indices with the image and averages it per
    patch; for the interior that is exactly the patch centre, ``left + (p + 0.5) w / grid
    - 0.5`` (bicubic resampling reproduces a linear ramp; it deviates by a fraction of a
    pixel at the crop border only). A horizontal flip reverses the columns.
    """
    p = torch.arange(grid, dtype=torch.float64) + 0.5
    xs = left + p * (width / grid) - 0.5
    ys = top + p * (height / grid) - 0.5
    if flipped:
        xs = xs.flip(0)
    yy, xx = torch.meshgrid(ys, xs, indexing="ij")
    return torch.stack([xx, yy], dim=-1).reshape(-1, 2).float()


class CrIBoDataset(MultiCropDataset):
    """Images -> {"crops": [view1, view2], "coords": [(N, 2), (N, 2)]}, deterministic per
    (seed, epoch, index). Crops come from the shared MultiCropAugmentation, with the box and
    flip of each; a test checks the coordinates against the pixels of a coordinate-coded image."""

    def __init__(self, paths, cfg: CrIBoCropConfig, patch_size: int, seed: int, loader=None):
        super().__init__(paths, MultiCropAugmentation(cfg), seed, loader=loader)
        self.cfg = cfg
        self.patch_size = patch_size
        self.grid = cfg.global_crops_size // patch_size

    def __getitem__(self, index: int) -> dict:
        from torchvision.transforms.v2 import functional as TF

        rng = sample_rng(self.seed, self.epoch, index)
        img = self.loader(self.paths[index])
        x = TF.to_pil_image(img) if isinstance(img, torch.Tensor) else img
        crops, boxes = self.augmentation.crops_and_boxes(x, rng)
        coords = [patch_coords(b.top, b.left, b.height, b.width, self.grid, b.flipped) for b in boxes]
        return {"crops": crops, "coords": coords}


# ============================================================================ clustering
@dataclass
class Clusters:
    """Result of :func:`cluster_tokens` for a batch of B images with N tokens per view."""

    hard: torch.Tensor  # (B, 2N, K) 0/1 assignment of the joint tokens (view 1 first)
    assign_v1: torch.Tensor  # (B, N, K) view-1 columns l1-normalised (empty columns stay 0)
    assign_v2: torch.Tensor  # (B, N, K)
    valid: torch.Tensor  # (B, K) bool: cluster non-empty in both views
    init_index: torch.Tensor  # (B, K) tokens drawn as initial centroids

    @property
    def labels(self) -> torch.Tensor:
        """(B, 2N) cluster index of every joint token."""
        return self.hard.argmax(-1)

    @property
    def objects_per_image(self) -> torch.Tensor:
        return self.valid.sum(1)


def draw_initial_centroids(batch: int, n_tokens: int, k: int, generator: torch.Generator | None) -> torch.Tensor:
    """K distinct random tokens per image, drawn as the official code does (uniform
    ``multinomial`` without replacement; on the CPU so a seed gives the same draw on any
    device, and the official CPU draw for the same generator state)."""
    if k > n_tokens:
        raise ConfigError(f"n_clusters = {k} exceeds the {n_tokens} tokens of the two views; "
                          f"lower n_clusters")
    p = torch.ones(batch, n_tokens, 1, device="cpu") / n_tokens  # CPU on purpose (see above)
    return p.squeeze(-1).multinomial(num_samples=k, replacement=False, generator=generator)


def _pairwise_distances(pos: torch.Tensor) -> torch.Tensor:
    """(B, n, n) Euclidean distances, rounded as the official sqrt(sum((p_j - p_i)^2)) (a sum of
    two squares is one addition either way); not cdist, whose matmul form rounds differently."""
    x, y = pos[..., 0], pos[..., 1]
    dx = x[:, None, :] - x[:, :, None]
    dy = y[:, None, :] - y[:, :, None]
    return torch.sqrt(dx * dx + dy * dy)


def positional_cost(dist: torch.Tensor, assignment: torch.Tensor, no_zero: torch.Tensor | None = None) -> torch.Tensor:
    """Distance from each token to the nearest *other* token of each cluster, (B, n, K).

    Official rules (``Clustering.compute_assignments``): distances of 0 (the token itself, or a
    token at the same position) do not count; a cluster with no such member gets the mean cost
    of the image (the mean taken while those entries are still 0); then each image is divided
    by its maximum. ``assignment`` is the current 0/1 assignment (B, n, K).
    """
    b, n, k = assignment.shape
    member = assignment > 0
    if no_zero is None:  # ``dist`` with its zeros as +inf; constant over the iterations
        no_zero = dist.masked_fill(dist == 0, float("inf"))
    if bool((member.sum(-1) <= 1).all()):
        # each token in at most one cluster: a scatter-min over the members, O(B n^2)
        labels = torch.where(member.any(-1), member.float().argmax(-1), torch.full_like(member[..., 0], k,
                                                                                          dtype=torch.long))
        out = torch.full((b, n, k + 1), float("inf"), dtype=dist.dtype, device=dist.device)
        out.scatter_reduce_(2, labels[:, None, :].expand(b, n, n), no_zero, reduce="amin", include_self=True)
        cost = out[..., :k]
    else:  # ties in the hard assignment: the official dense form, O(B n^2 K)
        cost = torch.where(member[:, None, :, :], no_zero[..., None], torch.full_like(no_zero[..., None],
                                                                                      float("inf"))).amin(2)
    return _fill_and_scale(cost)


def _fill_and_scale(cost: torch.Tensor) -> torch.Tensor:
    empty = torch.isinf(cost)
    cost = cost.masked_fill(empty, 0.0)
    avg = cost.mean(dim=(1, 2), keepdim=True).expand_as(cost)
    cost = torch.where(empty, avg, cost)
    return cost / cost.amax(dim=(1, 2))[:, None, None]


def sinkhorn_transport(cost: torch.Tensor, r: torch.Tensor, c: torch.Tensor, lam: float, n_iters: int) -> torch.Tensor:
    """Entropic optimal transport plan for a batch of costs (B, n, K) with row marginals
    ``r`` (B, n, 1) and column marginals ``c`` (B, 1, K): the official ``Clustering.sinkhorn``
    (exp(-lambda M), rows then columns per iteration, NaN -> 1e-8). The shared
    ``sinkhorn_knopp`` (SwAV form, one matrix, logits/temperature) does not fit: here the
    marginals are explicit and per image."""
    p = torch.exp(-lam * cost).float()
    p = p / p.sum(dim=(1, 2), keepdim=True)
    for _ in range(n_iters):
        p = p * (r / p.sum(dim=2, keepdim=True))
        p = p * (c / p.sum(dim=1, keepdim=True))
    return torch.nan_to_num(p, nan=1e-8)


@torch.no_grad()
def cluster_tokens(tokens_v1: torch.Tensor, tokens_v2: torch.Tensor, coords_v1: torch.Tensor,
                   coords_v2: torch.Tensor, K: int, lambda_pos: float, n_iters: int = 5,
                   sk_lambda: float = 20.0, sk_iters: int = 5, generator: torch.Generator | None = None, *,
                   init_index: torch.Tensor | None = None, update_marginals: bool = True,
                   cost_minmax: str = "batch") -> Clusters:
    """Joint-space clustering of both views' tokens into K objects (in fp32, no grad).

    tokens_v*: (B, N, d); coords_v*: (B, N, 2) original-image pixel coordinates.
    K distinct random tokens start as centroids (``init_index`` (B, K) overrides the draw);
    each of ``n_iters`` iterations: cosine similarity to the centroids, positional cost
    (:func:`positional_cost`), cost = -sim + lambda_pos * pos min-max normalised (over the
    whole batch as officially, or per image), Sinkhorn-Knopp with row marginals 1/n and
    column marginals 1/K (then, with ``update_marginals``, the current cluster sizes + 0.01,
    official ``--update_c``), hard argmax assignment, centroids = normalised member sums.
    """
    x = F.normalize(torch.cat([tokens_v1, tokens_v2], dim=1).float(), dim=-1)
    pos = torch.cat([coords_v1, coords_v2], dim=1).float()
    b, n, _ = x.shape
    n_view = tokens_v1.shape[1]
    if init_index is None:
        init_index = draw_initial_centroids(b, n, K, generator)
    init_index = init_index.to(x.device)
    assignment = F.one_hot(init_index, n).to(x.dtype).transpose(1, 2)  # (B, n, K)
    centroids = torch.bmm(assignment.transpose(1, 2), x)
    r = torch.ones(b, n, 1, device=x.device) / n
    c = torch.ones(b, 1, K, device=x.device) / K
    dist = _pairwise_distances(pos)
    no_zero = dist.masked_fill(dist == 0, float("inf"))
    for it in range(n_iters):
        sim = torch.bmm(x, centroids.transpose(1, 2))
        if it == 0:  # one token per cluster: the positional cost is a gather of its distances
            pos_cost = _fill_and_scale(no_zero.gather(2, init_index[:, None, :].expand(b, n, K)))
        else:
            pos_cost = positional_cost(dist, assignment, no_zero)
        cost = -sim + lambda_pos * pos_cost
        if cost_minmax == "batch":
            lo, hi = cost.min(), cost.max()
        else:
            lo, hi = cost.amin(dim=(1, 2), keepdim=True), cost.amax(dim=(1, 2), keepdim=True)
        cost = (cost - lo) / (hi - lo)
        plan = sinkhorn_transport(cost, r, c, sk_lambda, sk_iters)
        # ties give a token to several clusters, as the official equality test does
        assignment = (plan == plan.max(dim=-1, keepdim=True).values).float()
        if update_marginals:
            c = assignment.sum(dim=1, keepdim=True) + 1e-2
            c = c / c.sum(dim=-1, keepdim=True)
        centroids = F.normalize(torch.bmm(assignment.transpose(1, 2), x), dim=-1)
    a1, a2 = assignment[:, :n_view], assignment[:, n_view:]
    s1, s2 = a1.sum(dim=1, keepdim=True), a2.sum(dim=1, keepdim=True)
    valid = (s1 > 0).squeeze(1) & (s2 > 0).squeeze(1)
    return Clusters(hard=assignment, assign_v1=a1 / s1.clamp_min(1.0), assign_v2=a2 / s2.clamp_min(1.0),
                    valid=valid, init_index=init_index)


def object_representations(tokens_v1: torch.Tensor, tokens_v2: torch.Tensor,
                           clusters: Clusters) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-view object representations c_i^k = sum_n Q_i(n, k) z_i^n of the clusters valid in
    both views, (n_objects, d) each, ordered image by image then cluster by cluster."""
    valid = clusters.valid.flatten()
    out = []
    for tokens, assign in ((tokens_v1, clusters.assign_v1), (tokens_v2, clusters.assign_v2)):
        c = torch.bmm(assign.transpose(1, 2).to(tokens.dtype), tokens)
        out.append(c.flatten(0, 1)[valid])
    return out[0], out[1]


# ============================================================================ memory bank
@dataclass
class Retrieval:
    nn_v1: torch.Tensor  # (n, d) bank view-1 entry nearest to each view-1 object (un-normalised)
    nn_v2: torch.Tensor  # (n, d) bank view-2 entry nearest to each view-2 object
    index_v1: torch.Tensor  # (n,) bank rows
    index_v2: torch.Tensor
    cycle_v1: torch.Tensor  # (n,) bool: view-1 object passes the cycle check
    cycle_v2: torch.Tensor


def bank_row_valid(bank_counts: torch.Tensor, k: int) -> torch.Tensor:
    """(S * K,) bool: rows of the bank that hold an object (slot s holds bank_counts[s] of K)."""
    return (torch.arange(k, device=bank_counts.device)[None, :] < bank_counts[:, None]).flatten()


def _nearest(queries_n: torch.Tensor, keys_n: torch.Tensor, key_valid: torch.Tensor | None = None) -> torch.Tensor:
    sim = queries_n @ keys_n.T
    if key_valid is not None and not bool(key_valid.all()):
        sim = sim.masked_fill(~key_valid[None, :], float("-inf"))
    return sim.argmax(dim=-1)


@torch.no_grad()
def retrieve_nearest(obj_v1: torch.Tensor, obj_v2: torch.Tensor, bank: torch.Tensor, bank_unit: torch.Tensor,
                     bank_valid: torch.Tensor, pool_v1: torch.Tensor | None = None,
                     pool_v2: torch.Tensor | None = None, offset: int = 0) -> Retrieval:
    """Cosine nearest neighbours of this rank's teacher objects in the banks, and the cycle check.

    ``bank`` (2, R, d) un-normalised entries of M1 and M2, ``bank_unit`` the same l2-normalised
    (what the official code computes from the whole queue at every step), ``bank_valid`` (R,).
    View 1: j = nn(c_1, M1); the object passes when nn(M2[j], B_2) is itself, B_2 = ``pool_v2``
    (the batch's view-2 objects: this rank's by default; the all-gathered batch with ``offset`` =
    index of this rank's first object in it). View 2 symmetrically with M2, M1 and B_1.
    """
    pool_v1 = obj_v1 if pool_v1 is None else pool_v1
    pool_v2 = obj_v2 if pool_v2 is None else pool_v2
    q1, q2 = F.normalize(obj_v1.float(), dim=-1), F.normalize(obj_v2.float(), dim=-1)
    idx1 = _nearest(q1, bank_unit[0], bank_valid)
    idx2 = _nearest(q2, bank_unit[1], bank_valid)
    own = torch.arange(len(obj_v1), device=obj_v1.device) + offset
    cycle1 = _nearest(bank_unit[1][idx1], F.normalize(pool_v2.float(), dim=-1)) == own
    cycle2 = _nearest(bank_unit[0][idx2], F.normalize(pool_v1.float(), dim=-1)) == own
    return Retrieval(nn_v1=bank[0][idx1], nn_v2=bank[1][idx2], index_v1=idx1, index_v2=idx2,
                     cycle_v1=cycle1, cycle_v2=cycle2)


@torch.no_grad()
def enqueue(bank: torch.Tensor, bank_unit: torch.Tensor, bank_counts: torch.Tensor, bank_ptr: torch.Tensor,
            new_v1: torch.Tensor, new_v2: torch.Tensor, new_counts: torch.Tensor) -> None:
    """Put the objects of the newest images into the banks (in place), first in, first out.

    The bank is a ring of S image slots of K rows; slot s holds ``bank_counts[s]`` objects.
    Images are written at decreasing slots (``bank_ptr`` moves down), so reading the ring
    upward from ``bank_ptr`` lists the images newest first, in the order of the official
    shifting queue (which also decides which initial entries leave first). More new images
    than S: only the first S are kept, as officially. ``bank_unit`` gets the l2-normalised rows.
    """
    s_images = bank_counts.shape[0]
    k = bank.shape[1] // s_images
    new_counts = new_counts.to(device=bank.device, dtype=torch.long)
    if len(new_counts) > s_images:
        keep = int(new_counts[:s_images].sum())
        new_counts, new_v1, new_v2 = new_counts[:s_images], new_v1[:keep], new_v2[:keep]
    n_img = len(new_counts)
    if n_img == 0:
        return
    ptr = int(bank_ptr)
    slots = (ptr - n_img + torch.arange(n_img, device=bank.device)) % s_images
    starts = torch.cumsum(new_counts, 0) - new_counts
    image_of = torch.repeat_interleave(torch.arange(n_img, device=bank.device), new_counts)
    within = torch.arange(len(image_of), device=bank.device) - starts[image_of]
    rows = slots[image_of] * k + within
    for view, new in enumerate((new_v1, new_v2)):
        new = new.to(bank.dtype)
        bank[view, rows] = new
        bank_unit[view, rows] = F.normalize(new, dim=-1)
    bank_counts[slots] = new_counts
    bank_ptr.fill_((ptr - n_img) % s_images)


# ============================================================================ losses
def object_cross_view_loss(student_obj: torch.Tensor, teacher_obj_probs: torch.Tensor,
                           student_temp: float) -> torch.Tensor:
    """L_cv^o: both views' objects, teacher view 1 -> student view 2 and back, each the mean
    over objects, averaged (``CrIBoLoss`` loss_c). Inputs are (2n, out), view 1 first."""
    s1, s2 = (student_obj.float() / student_temp).chunk(2)
    t1, t2 = teacher_obj_probs.chunk(2)
    if s1.shape[0] == 0:  # no object in both views anywhere in the batch (official: NaN)
        # zero that keeps the graph: under DDP every rank must give the object head a gradient
        return student_obj.float().sum() * 0.0
    l12 = torch.sum(-t1 * F.log_softmax(s2, dim=-1), dim=-1).mean()
    l21 = torch.sum(-t2 * F.log_softmax(s1, dim=-1), dim=-1).mean()
    return (l12 + l21) / 2


def object_cross_image_loss(student_obj: torch.Tensor, teacher_nn_v1_probs: torch.Tensor,
                            teacher_nn_v2_probs: torch.Tensor, cycle_v1: torch.Tensor, cycle_v2: torch.Tensor,
                            student_temp: float, fix_normalisation: bool = False) -> torch.Tensor:
    """L_ci^o: the teacher's view-1 neighbour nn(c_1, M1) is the target of the student's
    view-2 object and nn(c_2, M2) that of the view-1 object, over cycle-consistent pairs.

    Default, as officially (main_cribo.py ``CrIBoLoss.forward``, ``loss_nn``): both directions
    are divided by the *first* direction's count of consistent pairs, and the loss is 0 when
    the first has none. ``fix_normalisation`` (the paper's "normalised by the count of valid
    pairs"): each direction is the mean over its own consistent pairs (0 when it has none),
    the two directions averaged."""
    s1, s2 = (student_obj.float() / student_temp).chunk(2)
    ce12 = torch.sum(-teacher_nn_v1_probs * F.log_softmax(s2, dim=-1), dim=-1)
    ce21 = torch.sum(-teacher_nn_v2_probs * F.log_softmax(s1, dim=-1), dim=-1)
    n1, n2 = cycle_v1.sum(), cycle_v2.sum()
    zero = student_obj.new_zeros((), dtype=torch.float32)
    if fix_normalisation:
        t12 = ce12[cycle_v1].sum() / n1 if n1 > 0 else zero
        t21 = ce21[cycle_v2].sum() / n2 if n2 > 0 else zero
        return (t12 + t21) / 2
    if n1 == 0:
        return zero
    return (ce12[cycle_v1].sum() / n1 + ce21[cycle_v2].sum() / n1) / 2


# ============================================================================ the method
def _step_seed(seed: int, step: int, rank: int) -> int:
    return int(np.random.SeedSequence([int(seed), int(step), int(rank)]).generate_state(1, dtype=np.uint64)[0]
               % (2 ** 63))


def _refresh_bank_unit_after_load(module: "CrIBo", incompatible_keys) -> None:
    module.refresh_bank_unit()


@register_method("cribo")
class CrIBo(Method):
    Config = CrIBoConfig

    def __init__(self, cfg: CrIBoConfig, backbone_cfg: BackboneConfig):
        super().__init__(cfg, backbone_cfg)
        student_bb = backbone_cfg.build(student=True)
        teacher_bb = backbone_cfg.build(student=False)
        check_crop_sizes(cfg.crops, student_bb.patch_size)
        grid = cfg.crops.global_crops_size // student_bb.patch_size
        if cfg.n_clusters > 2 * grid * grid:
            raise ConfigError(f"n_clusters = {cfg.n_clusters} exceeds the {2 * grid * grid} tokens of two "
                              f"{grid}x{grid} grids; lower n_clusters or raise crops.global_crops_size")
        heads = []
        for student in (True, False):
            head = DINOHead(student_bb.embed_dim, cfg.out_dim, hidden_dim=cfg.hidden_dim,
                            bottleneck_dim=cfg.bottleneck_dim, use_bn=cfg.use_bn_in_head,
                            norm_last_layer=cfg.norm_last_layer if student else True)
            # the object head: the same MLP, its own last layer (official name last_layer_c)
            head.last_layer_c = WeightNormLinear(cfg.bottleneck_dim, cfg.out_dim_obj,
                                                 fix_norm=cfg.norm_last_layer if student else True)
            heads.append(head)
        student_head, teacher_head = heads
        self.student = nn.ModuleDict({"backbone": student_bb, "head": student_head})
        self.teacher = nn.ModuleDict({"backbone": teacher_bb, "head": teacher_head})
        self.setup_teacher()
        self.centering = Centering(cfg.out_dim, cfg.center_momentum)
        self.centering_obj = Centering(cfg.out_dim_obj, cfg.center_momentum_obj)
        self.teacher_temp = TeacherTemperature(cfg.warmup_teacher_temp, cfg.teacher_temp,
                                               cfg.warmup_teacher_temp_epochs)
        self.teacher_temp_obj = TeacherTemperature(cfg.warmup_teacher_temp_obj, cfg.teacher_temp_obj,
                                                   cfg.warmup_teacher_temp_epochs)
        k, s, d = cfg.n_clusters, cfg.queue_size, student_bb.embed_dim
        # Official bank init: uniform random entries, every slot full (K per image); they
        # are only read by the cross-image loss after epoch 0, by when S images have
        # usually replaced them.
        bank = torch.rand(2, s * k, d)
        self.register_buffer("bank", bank)
        # the normalised copy searched by the NN retrieval: derived, so rebuilt after loading
        self.register_buffer("bank_unit", F.normalize(bank, dim=-1), persistent=False)
        self.register_load_state_dict_post_hook(_refresh_bank_unit_after_load)
        self.register_buffer("bank_counts", torch.full((s,), k, dtype=torch.long))
        self.register_buffer("bank_ptr", torch.zeros((), dtype=torch.long))
        # seed of the clustering's random initial centroids (drawn per step from (seed, step, rank))
        self.register_buffer("cluster_seed", torch.randint(0, 2 ** 62, (), dtype=torch.long))
        self.stats: dict[str, float] = {}

    # ---- data ---------------------------------------------------------------
    def build_dataset(self, data_root: Path, seed: int) -> CrIBoDataset:
        return CrIBoDataset(list_pretrain_images(data_root), self.cfg.crops, self.student.backbone.patch_size, seed)

    def collate(self, samples: list) -> dict:
        return collate_crops(samples)

    # ---- pieces -------------------------------------------------------------
    def cluster_generator(self, step: StepInfo) -> torch.Generator:
        """CPU generator of this step's initial centroids: a function of (cluster_seed, step, rank),
        so a resumed run draws what an uninterrupted one would."""
        return torch.Generator().manual_seed(_step_seed(int(self.cluster_seed), step.step, D.rank()))

    def project_objects(self, head: nn.Module, x: torch.Tensor) -> torch.Tensor:
        """Object head: the shared MLP and bottleneck, then ``last_layer_c``."""
        return head.last_layer_c(head.bottleneck(x))

    @torch.no_grad()
    def retrieve_and_update_bank(self, obj_v1: torch.Tensor, obj_v2: torch.Tensor,
                                 objects_per_image: torch.Tensor) -> Retrieval:
        """NN retrieval in the banks (before this batch enters them), cycle check, then FIFO update
        with the objects of every rank's images."""
        counts_all = D.all_gather_variable(objects_per_image.to(torch.long))
        if not self.cfg.fix_cycle_check_all_ranks or not D.is_dist():
            # official (and the only possibility in one process): the cycle check nn(M2[j], B_2)
            # searches this rank's objects only, so an object passes even when its neighbour's
            # nearest object in the global batch lives on another rank
            pool_v1 = pool_v2 = None
            offset = 0
        else:  # the fix: the whole global batch, every rank's objects
            pool_v1, pool_v2 = D.all_gather_variable(obj_v1), D.all_gather_variable(obj_v2)
            per_rank = D.all_gather_cat(torch.tensor([len(obj_v1)], device=obj_v1.device))
            offset = int(per_rank[:D.rank()].sum())
        valid = bank_row_valid(self.bank_counts, self.cfg.n_clusters)
        found = retrieve_nearest(obj_v1, obj_v2, self.bank, self.bank_unit, valid, pool_v1, pool_v2, offset)
        new_v1 = pool_v1 if pool_v1 is not None else D.all_gather_variable(obj_v1)
        new_v2 = pool_v2 if pool_v2 is not None else D.all_gather_variable(obj_v2)
        enqueue(self.bank, self.bank_unit, self.bank_counts, self.bank_ptr, new_v1.float(), new_v2.float(),
                counts_all)
        return found

    @torch.no_grad()
    def refresh_bank_unit(self) -> None:
        self.bank_unit.copy_(F.normalize(self.bank, dim=-1))

    @torch.no_grad()
    def _update_center_obj(self, teacher_obj_out: torch.Tensor) -> None:
        # official: sum over every rank's objects divided by their total count
        total = D.all_reduce_sum(teacher_obj_out.detach().float().sum(0, keepdim=True))
        count = D.all_reduce_sum(torch.tensor([float(len(teacher_obj_out))], device=total.device))
        if count.item() > 0:
            c = self.centering_obj
            c.center.copy_(c.center * c.momentum + total / count * (1 - c.momentum))

    # ---- optimisation ---------------------------------------------------------
    def training_step(self, batch: dict, step: StepInfo) -> dict[str, torch.Tensor]:
        cfg = self.cfg
        crops, coords = batch["crops"], batch["coords"]
        if len(crops) != 2 or len(coords) != 2:
            raise ValueError(f"expected two global crops with coordinates, found {len(crops)} crops and "
                             f"{len(coords)} coordinate sets")
        b = crops[0].shape[0]
        images = torch.cat(list(crops))
        n_prefix = self.teacher.backbone.num_prefix_tokens
        with torch.no_grad():
            t_tokens = self.teacher.backbone(images)
            teacher_out = self.teacher.head(t_tokens[:, 0])
            t_patch = t_tokens[:, n_prefix:].float()
            clusters = cluster_tokens(t_patch[:b], t_patch[b:], coords[0].to(t_patch.device),
                                      coords[1].to(t_patch.device), cfg.n_clusters, cfg.lambda_pos,
                                      cfg.cluster_iters, cfg.sinkhorn_lambda, cfg.sinkhorn_iters,
                                      self.cluster_generator(step),
                                      update_marginals=cfg.update_marginals, cost_minmax=cfg.cost_minmax)
            t_obj_v1, t_obj_v2 = object_representations(t_patch[:b], t_patch[b:], clusters)
        s_tokens = self.student.backbone(images)
        student_out = self.student.head(s_tokens[:, 0])
        s_patch = s_tokens[:, n_prefix:]
        s_obj_v1, s_obj_v2 = object_representations(s_patch[:b], s_patch[b:], clusters)
        found = self.retrieve_and_update_bank(t_obj_v1, t_obj_v2, clusters.objects_per_image)
        with torch.no_grad():
            teacher_obj = self.project_objects(self.teacher.head, torch.cat([t_obj_v1, t_obj_v2]))
            teacher_nn = self.project_objects(self.teacher.head, torch.cat([found.nn_v1, found.nn_v2]))
        student_obj = self.project_objects(self.student.head, torch.cat([s_obj_v1, s_obj_v2]))

        temp, temp_obj = self.teacher_temp(step), self.teacher_temp_obj(step)
        loss_global = multicrop_cross_entropy(student_out.float(), self.centering.softmax(teacher_out.float(), temp),
                                              2, 2, cfg.student_temp)
        loss_cv = object_cross_view_loss(student_obj, self.centering_obj.softmax(teacher_obj.float(), temp_obj),
                                         cfg.student_temp_obj)
        if step.epoch >= cfg.cross_image_start_epoch:
            nn_probs = self.centering_obj.softmax(teacher_nn.float(), temp_obj)
            nn1, nn2 = nn_probs.chunk(2)
            loss_ci = object_cross_image_loss(student_obj, nn1, nn2, found.cycle_v1, found.cycle_v2,
                                              cfg.student_temp_obj, cfg.fix_cross_image_normalisation)
        else:
            loss_ci = student_obj.new_zeros((), dtype=torch.float32)
        # centres move after the losses, from this step's teacher outputs (as officially)
        self.centering.update(teacher_out.float())
        self._update_center_obj(teacher_obj)
        n_obj = len(t_obj_v1)
        self.stats = {"objects_per_image": n_obj / max(1, b),
                      "cycle_ratio": float(found.cycle_v1.float().mean()) if n_obj else 0.0}
        loss = loss_global + loss_cv + loss_ci
        return {"loss": loss, "loss_global": loss_global.detach(), "loss_obj_cv": loss_cv.detach(),
                "loss_obj_ci": loss_ci.detach()}
