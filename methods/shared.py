"""Pieces shared by the self-distillation methods (DINO, iBOT, CrIBo, SynCLR).

Only what at least two methods use lives here (each piece names its users); what one method
alone needs lives in its own module, and the method modules import from each other only
through this one (tests/test_method_imports.py).

Everything here reproduces the official implementations (facebookresearch/dino,
bytedance/ibot, google-research/syn-rep-learn); each quirk kept on purpose says so
where it lives. Randomness never comes from a global RNG: augmentations and masks
take an explicit ``numpy.random.Generator`` so a (seed, epoch, index) triple fixes
every crop and every mask.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torchvision.transforms import InterpolationMode
from torchvision.transforms.v2 import functional as TF

from harness.runtime import distributed as D
from harness.data.transforms import IMAGENET_MEAN, IMAGENET_STD, rrc_box
from harness.errors import ConfigError, DataError
from harness.method import StepInfo
from harness.schedules import StepSchedule


# ============================================================================ heads
class WeightNormLinear(nn.Module):
    """Bias-free linear layer with weight normalisation, ``w = g * v / ||v||`` per output row.

    Written by hand (not ``torch.nn.utils.parametrizations``) so the state-dict names are
    the official checkpoints' ``weight_g`` (out, 1) and ``weight_v`` (out, in), and so the
    arithmetic is the one ``torch.nn.utils.weight_norm(dim=0)`` performs. ``weight_g`` starts
    at 1, as DINO/iBOT fill it after wrapping.
    """

    def __init__(self, in_dim: int, out_dim: int, fix_norm: bool = True):
        super().__init__()
        # v starts as nn.Linear's default init: the official head creates last_layer after
        # its trunc_normal init pass, so the last layer keeps PyTorch's kaiming-uniform init.
        self.weight_v = nn.Parameter(nn.Linear(in_dim, out_dim, bias=False).weight.detach().clone())
        self.weight_g = nn.Parameter(torch.ones(out_dim, 1))
        if fix_norm:
            self.weight_g.requires_grad_(False)

    @property
    def weight(self) -> torch.Tensor:
        v = self.weight_v
        return v * (self.weight_g / v.norm(p=2, dim=1, keepdim=True))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, self.weight)


def _trunc_normal_init(m: nn.Module) -> None:
    if isinstance(m, nn.Linear):
        nn.init.trunc_normal_(m.weight, std=0.02)  # timm's trunc_normal_: bounds +-2 absolute
        if m.bias is not None:
            nn.init.constant_(m.bias, 0)


class DINOHead(nn.Module):
    """DINO projection head: MLP (GELU, optional BatchNorm) -> l2-normalised bottleneck ->
    weight-normalised ``last_layer``.

    ``mlp`` and ``last_layer`` are public so a method can add a second last layer on the
    same MLP (iBOT's unshared ``last_layer2``, CrIBo's ``last_layer_c``): call
    :meth:`bottleneck` and apply its own :class:`WeightNormLinear`.
    Inputs may be (N, d) or (B, T, d); with BatchNorm the statistics are over every
    row given (for tokens, over B x T together: iBOT's ``CustomSequential``).
    """

    def __init__(self, in_dim: int, out_dim: int, hidden_dim: int = 2048, bottleneck_dim: int = 256,
                 nlayers: int = 3, use_bn: bool = False, norm_last_layer: bool = True):
        super().__init__()
        nlayers = max(nlayers, 1)
        if nlayers == 1:
            self.mlp = nn.Linear(in_dim, bottleneck_dim)
        else:
            layers: list[nn.Module] = [nn.Linear(in_dim, hidden_dim)]
            if use_bn:
                layers.append(nn.BatchNorm1d(hidden_dim))
            layers.append(nn.GELU())
            for _ in range(nlayers - 2):
                layers.append(nn.Linear(hidden_dim, hidden_dim))
                if use_bn:
                    layers.append(nn.BatchNorm1d(hidden_dim))
                layers.append(nn.GELU())
            layers.append(nn.Linear(hidden_dim, bottleneck_dim))
            self.mlp = nn.Sequential(*layers)
        self.apply(_trunc_normal_init)
        self.last_layer = WeightNormLinear(bottleneck_dim, out_dim, fix_norm=norm_last_layer)
        self.use_bn = use_bn

    def bottleneck(self, x: torch.Tensor) -> torch.Tensor:
        """l2-normalised MLP output (what every last layer consumes)."""
        lead = x.shape[:-1]
        x = self.mlp(x.reshape(-1, x.shape[-1]))
        return F.normalize(x, dim=-1, p=2).reshape(*lead, x.shape[-1])  # also for 0 rows

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.last_layer(self.bottleneck(x))


# ============================================================================ centring / SK
class Centering(nn.Module):
    """EMA centre of the teacher outputs (DINO ``center``; iBOT ``center`` / ``center2``;
    CrIBo's [CLS] centre -- its object centre averages over objects, methods/cribo.py).

    ``tokens=True`` is the patch-token variant: shape (1, 1, D), each image's tokens are
    averaged first, then images are averaged (iBOT ``update_center``, second half).
    The batch mean is summed over ranks and divided by the global count, as officially.
    """

    def __init__(self, dim: int, momentum: float = 0.9, tokens: bool = False):
        super().__init__()
        self.momentum = momentum
        self.tokens = tokens
        self.register_buffer("center", torch.zeros((1, 1, dim) if tokens else (1, dim)))

    def softmax(self, teacher_output: torch.Tensor, temp: float) -> torch.Tensor:
        """Centred, sharpened teacher probabilities softmax((t - c) / temp)."""
        return F.softmax((teacher_output - self.center) / temp, dim=-1)

    @torch.no_grad()
    def update(self, teacher_output: torch.Tensor) -> None:
        t = teacher_output.detach()
        if self.tokens:
            t = t.mean(1)
        batch_center = D.all_reduce_sum(torch.sum(t, dim=0, keepdim=True).float())
        batch_center = batch_center / (len(t) * D.world_size())
        self.center.copy_(self.center * self.momentum + batch_center * (1 - self.momentum))


@torch.no_grad()
def sinkhorn_knopp(teacher_logits: torch.Tensor, temp: float, n_iters: int = 3,
                   n_samples: int | torch.Tensor | None = None) -> torch.Tensor:
    """Sinkhorn-Knopp teacher targets (SwAV / DINOv2 / SynCLR), rows summed over ranks.

    ``teacher_logits``: (B, K) on this rank. ``n_samples`` is this rank's number of rows
    that count (defaults to B); the global count is its sum over ranks, as SynCLR's
    ``iBOTPatchLoss.sinkhorn_knopp_teacher`` does with ``n_masked_patches``. Like the
    official code, no max is subtracted before ``exp`` (fp32).
    Returns (B, K) assignments whose rows sum to 1.
    """
    q = torch.exp(teacher_logits.float() / temp).t()  # K x B
    n = torch.as_tensor(teacher_logits.shape[0] if n_samples is None else n_samples,
                        dtype=torch.long, device=q.device).reshape(1).clone()
    b = D.all_reduce_sum(n)  # global number of samples
    k = q.shape[0]
    sum_q = D.all_reduce_sum(torch.sum(q))
    q /= sum_q
    for _ in range(n_iters):
        sum_of_rows = D.all_reduce_sum(torch.sum(q, dim=1, keepdim=True))
        q /= sum_of_rows
        q /= k
        q /= torch.sum(q, dim=0, keepdim=True)
        q /= b
    q *= b
    return q.t()


def multicrop_cross_entropy(student_logits: torch.Tensor, teacher_probs: torch.Tensor,
                            n_crops: int, n_global: int, student_temp: float) -> torch.Tensor:
    """DINO's cross-view loss: mean over every (teacher global i, student crop v != i) pair of
    the batch-mean cross-entropy H(teacher_i, softmax(student_v / student_temp)). Also iBOT's
    [CLS] loss and CrIBo's global loss.

    ``student_logits``: (n_crops * B, K), crops in order (globals first);
    ``teacher_probs``: (n_global * B, K) already centred and sharpened.
    """
    student_out = (student_logits / student_temp).chunk(n_crops)
    teacher_out = teacher_probs.detach().chunk(n_global)
    total, n_terms = 0.0, 0
    for iq, q in enumerate(teacher_out):
        for v in range(len(student_out)):
            if v == iq:
                continue  # same view for teacher and student
            total = total + torch.sum(-q * F.log_softmax(student_out[v], dim=-1), dim=-1).mean()
            n_terms += 1
    if n_terms == 0:
        raise ValueError(f"no (teacher, student) crop pairs: n_global={n_global}, n_crops={n_crops}")
    return total / n_terms


# ============================================================================ schedules
def teacher_temp_schedule(warmup_temp: float, temp: float, warmup_epochs: float, epochs: int,
                          steps_per_epoch: int, start_epoch: int = 0,
                          per_step: bool = False) -> np.ndarray:
    """Teacher temperature for every step (length ``epochs * steps_per_epoch``).

    Default: DINO/iBOT per-epoch warm-up, ``np.linspace(warmup_temp, temp, warmup_epochs)``
    (endpoint included, so the last warm-up epoch already uses ``temp``), held constant
    within an epoch; ``start_epoch`` > 0 holds ``warmup_temp`` that many epochs first
    (iBOT's patch temperature with ``pred_start_epoch``).
    ``per_step=True``: SynCLR's linear warm-up in fractional epochs,
    ``warmup_temp * (1 - a) + temp * a`` with ``a = (step / steps_per_epoch) / warmup_epochs``.
    """
    if steps_per_epoch <= 0 or epochs <= 0:
        raise ValueError(f"epochs ({epochs}) and steps_per_epoch ({steps_per_epoch}) must be positive")
    if per_step:
        t = np.arange(epochs * steps_per_epoch) / steps_per_epoch
        if warmup_epochs <= 0:
            return np.full(len(t), float(temp))
        a = t / warmup_epochs
        return np.where(t >= warmup_epochs, temp, warmup_temp * (1 - a) + temp * a)
    warmup_epochs = int(warmup_epochs)
    if start_epoch + warmup_epochs > epochs:
        raise ConfigError(f"teacher temperature warm-up ({start_epoch} + {warmup_epochs} epochs) is longer "
                          f"than training ({epochs} epochs); shorten warmup_teacher_temp_epochs")
    per_epoch = np.concatenate((
        np.ones(start_epoch) * warmup_temp,
        np.linspace(warmup_temp, temp, warmup_epochs),
        np.ones(epochs - warmup_epochs - start_epoch) * temp,
    ))
    return np.repeat(per_epoch, steps_per_epoch)


class TeacherTemperature(StepSchedule):
    """Per-step teacher temperature, built once the engine's step counts are known (DINO,
    iBOT, CrIBo, SynCLR)."""

    def __init__(self, warmup_temp: float, temp: float, warmup_epochs: float, **kwargs):
        self.args = (warmup_temp, temp, warmup_epochs)
        self.kwargs = kwargs
        self._key: tuple | None = None
        self._values: np.ndarray | None = None

    def __call__(self, step: StepInfo) -> float:
        key = (step.steps_per_epoch, step.total_steps)
        if key != self._key:
            epochs = -(-step.total_steps // max(1, step.steps_per_epoch))
            self._values = teacher_temp_schedule(*self.args, epochs=epochs,
                                                 steps_per_epoch=step.steps_per_epoch, **self.kwargs)
            self._key = key
        return float(self._values[min(step.step, len(self._values) - 1)])


# ============================================================================ multi-crop
@dataclass
class MultiCropConfig:
    """Multi-crop augmentation (DINO ``DataAugmentationDINO`` / iBOT / SynCLR defaults).

    Crop recipes: the first global crop uses ``*_global1`` probabilities, every other
    global crop ``*_global2`` (DINO/iBOT); ``global_recipe_order: random`` picks the
    starting recipe per image with probability 1/2 (SynCLR's ``(i + seed) % 2``).
    """

    global_crops_number: int = 2
    global_crops_size: int = 224
    global_crops_scale: tuple[float, float] = (0.4, 1.0)
    local_crops_number: int = 8
    local_crops_size: int = 96
    local_crops_scale: tuple[float, float] = (0.05, 0.4)
    flip_p: float = 0.5
    color_jitter_p: float = 0.8
    brightness: float = 0.4
    contrast: float = 0.4
    saturation: float = 0.2
    hue: float = 0.1  # 0.5 = the full hue circle
    grayscale_p: float = 0.2
    blur_p_global1: float = 1.0
    blur_p_global2: float = 0.1
    blur_p_local: float = 0.5
    blur_sigma: tuple[float, float] = (0.1, 2.0)
    solarize_p_global1: float = 0.0
    solarize_p_global2: float = 0.2
    solarize_p_local: float = 0.0
    global_recipe_order: str = "fixed"  # fixed | random
    mean: tuple[float, float, float] = IMAGENET_MEAN
    std: tuple[float, float, float] = IMAGENET_STD

    def __post_init__(self):
        for name in ("global_crops_scale", "local_crops_scale", "blur_sigma"):
            lo, hi = getattr(self, name)
            if not 0 < lo <= hi:
                raise ValueError(f"{name} must be (low, high) with 0 < low <= high, found {(lo, hi)}")
        for name in ("flip_p", "color_jitter_p", "grayscale_p", "blur_p_global1", "blur_p_global2",
                     "blur_p_local", "solarize_p_global1", "solarize_p_global2", "solarize_p_local"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"{name} is a probability in [0, 1], found {getattr(self, name)}")
        if not 0.0 <= self.hue <= 0.5:
            raise ValueError(f"hue must be in [0, 0.5] (0.5 = full circle), found {self.hue}")
        if self.global_crops_number < 1 or self.local_crops_number < 0:
            raise ValueError(f"need >= 1 global crop and >= 0 local crops, found "
                             f"{self.global_crops_number} and {self.local_crops_number}")
        if self.global_recipe_order not in ("fixed", "random"):
            raise ValueError(f"global_recipe_order must be 'fixed' or 'random', found {self.global_recipe_order!r}")

    @property
    def n_crops(self) -> int:
        return self.global_crops_number + self.local_crops_number


def _uniform(rng: np.random.Generator, a: float, b: float) -> float:
    """Python's random.uniform(a, b) = a + (b - a) * U[0, 1), defined for a > b too."""
    return a + (b - a) * rng.random()


def random_resized_crop_params(rng: np.random.Generator, height: int, width: int,
                               scale: Sequence[float], ratio=(3 / 4, 4 / 3)) -> tuple[int, int, int, int]:
    """torchvision ``RandomResizedCrop.get_params`` with an explicit numpy RNG (float64):
    (top, left, h, w)."""
    area = height * width
    log_ratio = (math.log(ratio[0]), math.log(ratio[1]))
    return rrc_box(height, width, ratio,
                   lambda: (area * _uniform(rng, scale[0], scale[1]), math.exp(_uniform(rng, *log_ratio))),
                   lambda n: int(rng.integers(0, n)))


@dataclass(frozen=True)
class CropBox:
    """Where a crop came from: its box in the original image (pixels) and whether it was flipped."""

    top: int
    left: int
    height: int
    width: int
    flipped: bool


class MultiCropAugmentation:
    """Image -> [global crops..., local crops...] as normalised float tensors.

    Per crop, in the official order and with the official PIL operations: RandomResizedCrop
    (bicubic) -> horizontal flip -> colour jitter (random order of the four ops, p
    ``color_jitter_p``) -> grayscale -> Gaussian blur (PIL ``GaussianBlur(radius=sigma)``)
    -> solarize (PIL, threshold 128) -> to tensor -> normalise. Every parameter is drawn
    from the given RNG (torchvision draws them from the global RNG).
    """

    def __init__(self, cfg: MultiCropConfig):
        self.cfg = cfg

    def __call__(self, img, rng: np.random.Generator) -> list[torch.Tensor]:
        return self.crops_and_boxes(img, rng)[0]

    def crops_and_boxes(self, img, rng: np.random.Generator) -> tuple[list[torch.Tensor], list[CropBox]]:
        """The crops and, for each, where it came from (CrIBo places its patches with them)."""
        c = self.cfg
        img = _as_pil(img)
        first = 0 if c.global_recipe_order == "fixed" else int(rng.integers(0, 2))
        crops = []
        for i in range(c.global_crops_number):
            recipe1 = (i + first) % 2 == 0 if c.global_recipe_order == "random" else i == 0
            blur_p = c.blur_p_global1 if recipe1 else c.blur_p_global2
            sol_p = c.solarize_p_global1 if recipe1 else c.solarize_p_global2
            crops.append(self._crop(img, rng, c.global_crops_size, c.global_crops_scale, blur_p, sol_p))
        for _ in range(c.local_crops_number):
            crops.append(self._crop(img, rng, c.local_crops_size, c.local_crops_scale,
                                    c.blur_p_local, c.solarize_p_local))
        return [x for x, _ in crops], [box for _, box in crops]

    def _crop(self, img, rng: np.random.Generator, size: int, scale, blur_p: float,
              solarize_p: float) -> tuple[torch.Tensor, CropBox]:
        from PIL import ImageFilter, ImageOps

        c = self.cfg
        top, left, h, w = random_resized_crop_params(rng, img.height, img.width, scale)
        x = TF.resized_crop(img, top, left, h, w, [size, size], interpolation=InterpolationMode.BICUBIC)
        flipped = bool(rng.random() < c.flip_p)
        if flipped:
            x = TF.horizontal_flip(x)
        if rng.random() < c.color_jitter_p:
            x = self._color_jitter(x, rng)
        if rng.random() < c.grayscale_p:
            x = TF.rgb_to_grayscale(x, num_output_channels=3)
        if blur_p > 0 and rng.random() <= blur_p:
            x = x.filter(ImageFilter.GaussianBlur(radius=_uniform(rng, *c.blur_sigma)))
        if solarize_p > 0 and rng.random() < solarize_p:
            x = ImageOps.solarize(x, 128)
        x = TF.normalize(TF.to_dtype(TF.pil_to_tensor(x), torch.float32, scale=True), list(c.mean), list(c.std))
        return x, CropBox(top, left, h, w, flipped)

    def _color_jitter(self, x, rng: np.random.Generator):
        c = self.cfg
        order = rng.permutation(4)  # torchvision ColorJitter: random order, factors drawn once
        b = _uniform(rng, max(0.0, 1 - c.brightness), 1 + c.brightness) if c.brightness > 0 else None
        ct = _uniform(rng, max(0.0, 1 - c.contrast), 1 + c.contrast) if c.contrast > 0 else None
        s = _uniform(rng, max(0.0, 1 - c.saturation), 1 + c.saturation) if c.saturation > 0 else None
        hu = _uniform(rng, -c.hue, c.hue) if c.hue > 0 else None
        for op in order:
            if op == 0 and b is not None:
                x = TF.adjust_brightness(x, b)
            elif op == 1 and ct is not None:
                x = TF.adjust_contrast(x, ct)
            elif op == 2 and s is not None:
                x = TF.adjust_saturation(x, s)
            elif op == 3 and hu is not None:
                x = TF.adjust_hue(x, hu)
        return x


def _as_pil(img):
    """PIL image from a PIL image or a (3, H, W) uint8 tensor."""
    if isinstance(img, torch.Tensor):
        if img.dtype != torch.uint8:
            raise ValueError(f"expected a PIL image or a uint8 tensor, found {img.dtype}")
        return TF.to_pil_image(img)
    return img.convert("RGB") if img.mode != "RGB" else img


# ============================================================================ masking
class BlockMaskGenerator:
    """iBOT's ``ImageFolderMask`` masking (BEiT blockwise), with an explicit RNG.

    ``pred_ratio`` / ``pred_ratio_var`` are numbers or equal-length lists. With lists, a
    ratio is drawn for every entry (``U(r - v, r + v)`` when ``v > 0``, else ``r``) and
    one of them is chosen uniformly: ``[0, 0.3]`` with ``[0, 0.2]`` is iBOT's random MIM
    (no masking with p 1/2, else a ratio in U(0.1, 0.5)). Blocks are added until the
    masked count reaches ``ratio * H * W``: each block has area U(low, remaining) with
    ``low = (min(H, W) // 3) ** 2`` and log-uniform aspect in ``pred_aspect_ratio``, 10
    attempts per block, stop when an attempt round adds nothing. ``pred_shape='rand'``
    masks ``int(ratio * H * W)`` random patches.
    """

    def __init__(self, pred_ratio: float | Sequence[float] = 0.3, pred_ratio_var: float | Sequence[float] = 0.0,
                 pred_aspect_ratio: Sequence[float] = (0.3, 1 / 0.3), pred_shape: str = "block",
                 pred_start_epoch: int = 0):
        ratio = list(pred_ratio) if isinstance(pred_ratio, (list, tuple)) else pred_ratio
        var = list(pred_ratio_var) if isinstance(pred_ratio_var, (list, tuple)) else pred_ratio_var
        # one-element lists behave as scalars, a scalar var spreads over a list of ratios
        ratio = ratio[0] if isinstance(ratio, list) and len(ratio) == 1 else ratio
        var = var[0] if isinstance(var, list) and len(var) == 1 else var
        if isinstance(ratio, list) and not isinstance(var, list):
            var = [var] * len(ratio)
        if isinstance(ratio, list):
            if len(var) != len(ratio):
                raise ConfigError(f"pred_ratio_var must have {len(ratio)} entries like pred_ratio, found {var}")
            bad = [(r, v) for r, v in zip(ratio, var) if r < v]
        else:
            if isinstance(var, list):
                raise ConfigError(f"pred_ratio_var is a list {var} but pred_ratio is a number {ratio}")
            bad = [(ratio, var)] if ratio < var else []
        if bad:
            raise ConfigError(f"pred_ratio must be >= pred_ratio_var, found {bad}")
        if pred_shape not in ("block", "rand"):
            raise ConfigError(f"pred_shape must be 'block' or 'rand', found {pred_shape!r}")
        self.pred_ratio = ratio
        self.pred_ratio_var = var
        self.log_aspect_ratio = tuple(math.log(a) for a in pred_aspect_ratio)
        self.pred_shape = pred_shape
        self.pred_start_epoch = pred_start_epoch

    def get_pred_ratio(self, rng: np.random.Generator, epoch: int | None = None) -> float:
        if epoch is not None and epoch < self.pred_start_epoch:
            return 0.0
        if isinstance(self.pred_ratio, list):
            ratios = [_uniform(rng, r - v, r + v) if v > 0 else r
                      for r, v in zip(self.pred_ratio, self.pred_ratio_var)]
            return float(ratios[int(rng.integers(0, len(ratios)))])
        if self.pred_ratio_var > 0:
            return _uniform(rng, self.pred_ratio - self.pred_ratio_var, self.pred_ratio + self.pred_ratio_var)
        return float(self.pred_ratio)

    def __call__(self, h: int, w: int, rng: np.random.Generator, epoch: int | None = None) -> np.ndarray:
        return self.mask_for_ratio(h, w, self.get_pred_ratio(rng, epoch), rng)

    def mask_for_ratio(self, H: int, W: int, ratio: float, rng: np.random.Generator) -> np.ndarray:
        high = ratio * H * W
        if self.pred_shape == "rand":
            n = int(high)
            mask = np.hstack([np.zeros(H * W - n), np.ones(n)]).astype(bool)
            rng.shuffle(mask)
            return mask.reshape(H, W)
        mask = np.zeros((H, W), dtype=bool)
        mask_count = 0
        while mask_count < high:
            max_mask_patches = high - mask_count
            delta = 0
            for _ in range(10):
                low = (min(H, W) // 3) ** 2
                target_area = _uniform(rng, low, max_mask_patches)
                aspect = math.exp(_uniform(rng, *self.log_aspect_ratio))
                bh = int(round(math.sqrt(target_area * aspect)))
                bw = int(round(math.sqrt(target_area / aspect)))
                if bw < W and bh < H:
                    top = int(rng.integers(0, H - bh + 1))
                    left = int(rng.integers(0, W - bw + 1))
                    block = mask[top: top + bh, left: left + bw]
                    num_masked = int(block.sum())
                    if 0 < bh * bw - num_masked <= max_mask_patches:
                        delta += bh * bw - num_masked
                        block[...] = True
                if delta > 0:
                    break
            if delta == 0:
                break
            mask_count += delta
        return mask


# ============================================================================ data
def list_pretrain_images(root: str | Path) -> list[Path]:
    """Pretraining images: a SynthScenes root (``pretrain.txt``) or any folder of images
    (ImageFolder layout or flat), sorted for a stable order."""
    from harness.data.io import is_image_file

    root = Path(root)
    if (root / "pretrain.txt").is_file():
        from harness.data.synthetic import pretrain_image_paths

        return list(pretrain_image_paths(root))
    if not root.is_dir():
        raise DataError(f"pretraining data root {root} does not exist; pass an existing folder of "
                        f"images (ImageFolder layout or flat) or a SynthScenes root, which "
                        f"`ssl-bench data synth --out {root}` generates")
    paths = sorted(p for p in root.rglob("*") if p.is_file() and is_image_file(p.name))
    if not paths:
        raise DataError(f"no images (.jpg/.jpeg/.png) under {root} and no pretrain.txt; "
                        f"give a SynthScenes root or an ImageFolder directory")
    return paths


def sample_rng(seed: int, epoch: int, index: int, stream: int = 0) -> np.random.Generator:
    """The RNG of one sample: a function of (seed, epoch, index) only, so results do not
    depend on worker count, order or process."""
    return np.random.default_rng([int(seed), int(epoch), int(index), int(stream)])


class MultiCropDataset(torch.utils.data.Dataset):
    """Images -> multi-crop views, deterministic per (seed, epoch, index).

    ``extra(sample_crops, rng, epoch)`` may add per-sample data (iBOT masks); it then
    yields ``{"crops": [...], **extra}``, else the list of crops. The engine calls
    :meth:`set_epoch` before each epoch (DataLoader workers copy the dataset when an
    iterator starts, so the epoch must be set before that).
    """

    def __init__(self, paths: Sequence[Path], augmentation: MultiCropAugmentation, seed: int,
                 extra: Callable | None = None, loader: Callable | None = None):
        self.paths = list(paths)
        self.augmentation = augmentation
        self.seed = seed
        self.epoch = 0
        self.extra = extra
        if loader is None:
            from harness.data.io import load_rgb as loader
        self.loader = loader

    def set_epoch(self, epoch: int) -> None:
        self.epoch = int(epoch)

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, index: int):
        rng = sample_rng(self.seed, self.epoch, index)
        crops = self.augmentation(self.loader(self.paths[index]), rng)
        if self.extra is None:
            return crops
        return {"crops": crops, **self.extra(crops, rng, self.epoch)}


def collate_crops(samples: list) -> list[torch.Tensor] | dict:
    """Stack each crop position over the batch: list of (B, 3, h, w), one per crop; dict
    samples stack every list-valued key the same way (masks become bool tensors)."""
    if isinstance(samples[0], dict):
        out = {}
        for key in samples[0]:
            out[key] = [torch.stack([torch.as_tensor(s[key][i]) for s in samples])
                        for i in range(len(samples[0][key]))]
        return out
    return [torch.stack([s[i] for s in samples]) for i in range(len(samples[0]))]


# ============================================================================ forwards
def forward_by_resolution(backbone: nn.Module, crops: Sequence[torch.Tensor],
                          masks: Sequence[torch.Tensor] | None = None,
                          cls_only: bool = False) -> torch.Tensor:
    """Official ``MultiCropWrapper``: one backbone call per run of consecutive crops of
    equal resolution, outputs concatenated in crop order: tokens (N, T, d), or the CLS
    tokens (N, d) with ``cls_only`` (needed when resolutions, hence token counts, differ).
    ``masks`` (one (B, h, w) bool tensor per crop) go to the backbone's mask token."""
    sizes = [c.shape[-1] for c in crops]
    outs, start = [], 0
    while start < len(crops):
        end = start
        while end < len(crops) and sizes[end] == sizes[start]:
            end += 1
        x = torch.cat(list(crops[start:end]))
        if masks is not None:
            out = backbone(x, mask=torch.cat(list(masks[start:end])))
        else:
            out = backbone(x)
        outs.append(out[:, 0] if cls_only else out)
        start = end
    return torch.cat(outs)


def check_crop_sizes(crops: MultiCropConfig, patch_size: int) -> None:
    """Crops must tile into whole patches."""
    for name in ("global_crops_size", "local_crops_size"):
        size = getattr(crops, name)
        if size % patch_size:
            raise ConfigError(f"crops.{name} = {size} is not a multiple of the patch size {patch_size}; "
                              f"pick a multiple of {patch_size}")
