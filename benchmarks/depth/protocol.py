"""Monocular depth, linear probe (``depth_linear``), as dinov3/eval/depth runs it with
configs/config-nyu.yaml (commit 6876159); benchmarks/depth/README.md gives the source of each default.

The backbone is frozen; a BatchNorm + 1x1 convolution head over its final-normed last-layer patch
grid predicts 256 depth-bin weights (0.001-10 m, linear bins), trained with the scale-invariant
log loss on random 416x544 crops for 38,400 iterations of batch 16 (AdamW 3e-4, WarmupOneCycle);
evaluated on the full 480x640 frames with the flipped image averaged in, inside the Eigen crop,
as the mean over images of each image's RMSE, AbsRel, log RMSE and delta accuracies.

Preset dinov2_linear4 swaps in DINOv2's linear4 head (blocks.py, head.py: four intermediate blocks
without the final norm, each with its class token, upsampled x4, no BatchNorm, bins to 80 m);
dinov2_linear4_kitti runs it on KITTI's Eigen split (harness/data/kitti.py: KB crop, Garg mask, 80 m).

Memory: training images are augmented and passed through the backbone one batch at a time and
evaluation images one at a time (with their flip); no feature is kept beyond its batch.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset

from benchmarks.depth.blocks import block_indices
from benchmarks.depth.head import LinearDepthHead, SILogLoss, logits_to_depth, set_schedule, warmup_one_cycle
from benchmarks.depth.metrics import REPORTED, evaluate_prediction
from benchmarks.depth.transforms import TrainAugment, center_pad, fixed_crop_box, kb_crop_box, normalize, to_tensor
from harness.data.transforms import IMAGENET_MEAN, IMAGENET_STD
from harness.errors import ConfigError, DataError, NotApplicable
from harness.examples import Example, Panel, chosen_items, seen_by_model
from harness.per_image import means_block
from harness.presets import load_presets
from harness.protocol import Protocol, ProtocolResult
from harness.registry import DATASETS, register_protocol


@dataclass
class Config:
    dataset: str = "nyu"
    train_split: str = "train"
    val_split: str = "test"                # DINOv3's NYU:split=VAL reads nyu_test.txt
    preset: str | None = None
    # --- features (config-nyu.yaml decoder_head)
    layers: int = 1                        # the last n blocks (backbone_out_layers LAST = 1)
    blocks: Literal["last", "dinov2"] = "last"           # which blocks: benchmarks/depth/blocks.py
    final_norm: bool = True                # use_backbone_norm
    cls_token: bool = False                # use_cls_token
    batchnorm: bool = True                 # use_batchnorm
    pad_to_patch: Literal["center", "none"] = "center"   # adapt_to_patch_size CENTER_PADDING
    upsample: int = 1                      # features resized x n before the head (dinov2 BNHead: 4)
    conv_init: Literal["normal", "default"] = "normal"   # N(0, 0.01) (dinov3) | nn.Conv2d's (dinov2)
    # --- depth head
    n_bins: int = 256                      # n_output_channels
    min_depth: float = 0.001
    max_depth: float = 10.0
    bins: Literal["linear", "log"] = "linear"            # DecoderConfig.bins_strategy
    bin_norm: Literal["linear", "softmax", "sigmoid"] = "linear"  # DecoderConfig.norm_strategy
    bins_max_depth: float | None = None    # the last bin when not max_depth (dinov2 hub head: 80)
    # --- loss (loss.py SigLoss: sqrt(var + 0.15 mean^2), variance left out for 100 calls)
    silog_lambda: float = 0.15
    silog_warmup_iters: int = 100
    # --- optimisation (config-nyu.yaml optimizer / scheduler; bs 2 x 8 GPUs)
    lr: float = 3e-4
    beta2: float = 0.99
    weight_decay: float = 1e-4
    grad_clip: float = 35.0
    total_iters: int = 38400
    warmup_iters: int = 12800
    div_factor: float = 25.0
    final_div_factor: float = 1000.0
    base_momentum: float = 0.85
    max_momentum: float = 0.95
    batch_size: int = 16
    # --- data (config-nyu.yaml transforms; config.py defaults)
    depth_scale: float = 1000.0            # normalization_constant: PNG millimetres -> metres
    fixed_crop: Literal["nyu", "kb", "full"] = "nyu"
    kb_crop: list[int] = field(default_factory=lambda: [352, 1216])   # KITTI's KB crop (h, w)
    random_crop: list[int] = field(default_factory=lambda: [416, 544])
    rotation: float = 2.5
    brightness: list[float] = field(default_factory=lambda: [0.75, 1.25])
    colour_p: float = 0.5
    norm_mean: list[float] = field(default_factory=lambda: list(IMAGENET_MEAN))
    norm_std: list[float] = field(default_factory=lambda: list(IMAGENET_STD))
    # --- evaluation
    eval_crop: Literal["full", "kb"] = "full"              # the evaluation frame: whole, or KB-cropped
    eval_mask: Literal["nyu_eigen", "kitti_garg", "kitti_eigen", "full"] = "nyu_eigen"
    tta: bool = True                       # eval.use_tta: horizontal flip averaged in
    seed: int = 321
    # --- execution (not in the fingerprint)
    num_workers: int = 0
    progress: bool = True

    def __post_init__(self):
        checks = [
            (self.layers >= 1, f"layers must be >= 1, found {self.layers}"),
            (self.n_bins >= 1, f"n_bins must be >= 1, found {self.n_bins}"),
            (0 < self.min_depth < self.max_depth, f"need 0 < min_depth < max_depth, found {self.min_depth}, "
                                                  f"{self.max_depth}"),
            (self.total_iters >= 1 and 0 <= self.warmup_iters < self.total_iters,
             f"need 0 <= warmup_iters < total_iters, found {self.warmup_iters}, {self.total_iters}"),
            (self.batch_size >= 2, f"batch_size must be >= 2 (BatchNorm statistics), found {self.batch_size}"),
            (len(self.random_crop) == 2 and min(self.random_crop) >= 1, f"random_crop needs (h, w), found "
                                                                        f"{self.random_crop}"),
            (len(self.brightness) == 2, "brightness needs (low, high)"),
            (self.depth_scale > 0, "depth_scale must be > 0"),
            (self.upsample >= 1, f"upsample must be >= 1, found {self.upsample}"),
            (self.bins_max_depth is None or self.bins_max_depth > self.min_depth,
             f"bins_max_depth must exceed min_depth, found {self.bins_max_depth}"),
            (len(self.kb_crop) == 2 and min(self.kb_crop) >= 1, f"kb_crop needs (h, w), found {self.kb_crop}"),
        ]
        for ok, msg in checks:
            if not ok:
                raise ValueError(msg)


# dinov3, dinov2_linear4, dinov2_linear4_kitti, synth, synth_linear4, synth_kitti:
# benchmarks/depth/presets/depth_linear_*.yaml
PRESETS: dict[str, dict[str, Any]] = load_presets("depth_linear", Path(__file__).parent / "presets")


class _TrainImages(Dataset):
    """Augmented training crops; image i of epoch e draws from Generator([seed, e, i])."""

    def __init__(self, data, augment: TrainAugment, seed: int, epoch: int):
        self.data, self.augment, self.seed, self.epoch = data, augment, seed, epoch

    def __len__(self):
        return len(self.data)

    def __getitem__(self, i):
        rng = np.random.default_rng([self.seed, self.epoch, i])
        rgb = np.asarray(self.data.load_image(i).convert("RGB"))
        return self.augment(rgb, self.data.load_depth(i), rng)


class _EvalImages(Dataset):
    """The evaluation frames, KB-cropped (image and ground truth) with eval_crop "kb", as the
    toolbox's KITTI test pipeline and pre_eval crop them."""

    def __init__(self, data, cfg: Config):
        self.data, self.cfg = data, cfg

    def __len__(self):
        return len(self.data)

    def __getitem__(self, i):
        rgb, depth = np.asarray(self.data.load_image(i).convert("RGB")), self.data.load_depth(i)
        if self.cfg.eval_crop == "kb":
            y1, y2, x1, x2 = kb_crop_box(*depth.shape, self.cfg.kb_crop)
            rgb, depth = rgb[y1:y2, x1:x2], np.ascontiguousarray(depth[y1:y2, x1:x2])
        img = normalize(to_tensor(rgb), self.cfg.norm_mean, self.cfg.norm_std)
        return img, torch.from_numpy(depth)[None]


def eigen_frame(h: int, w: int) -> bool:
    """Whether an h x w map is NYU's 480x640 frame scaled uniformly (to the pixel), the frame the
    Eigen crop's coordinates (datasets_utils.py make_valid_mask) are given on."""
    return abs(h * 640 - w * 480) < 640  # |h - 0.75 w| < 1 pixel


def _first(batch):
    return batch[0]


def _n_blocks(backbone) -> int | None:
    blocks = getattr(backbone, "num_blocks", None)
    return blocks if isinstance(blocks, int) else len(getattr(backbone, "blocks", [])) or None


@register_protocol("depth_linear")
class DepthLinear(Protocol):
    Config = Config
    PRESETS = PRESETS
    DEFAULT_PRESET = "dinov3"
    NOT_IN_FINGERPRINT = ("num_workers", "progress")
    RECORDED_AS = {"final_norm": "backbone_norm"}  # its records' name
    # the linear4 and KITTI settings, at the values the dinov3 preset's records were measured with
    ABSENT_AT = {"blocks": "last", "upsample": 1, "conv_init": "normal", "bins_max_depth": None,
                 "kb_crop": [352, 1216], "eval_crop": "full"}

    # ------------------------------------------------------------------ checks before any work
    def check_model(self, backbone) -> int:
        """The stride of the model's patch grid; a model without one, or a crop the grid does not
        fit, is refused here, before data is read."""
        cfg = self.cfg
        stride = getattr(backbone, "patch_size", None)
        if not callable(getattr(backbone, "get_features", None)) or not isinstance(stride, int) or stride < 1:
            raise NotApplicable(f"depth_linear trains a head on a model's patch grid; {type(backbone).__name__} "
                                f"gives none (no get_features with a patch_size)")
        h, w = cfg.random_crop
        if min(h, w) < stride:
            raise ConfigError(f"depth_linear: random_crop {h}x{w} is smaller than the model's stride {stride}")
        if cfg.pad_to_patch == "none" and (h % stride or w % stride):
            raise ConfigError(f"depth_linear: random_crop {h}x{w} is not a multiple of the model's stride {stride} "
                              f"and pad_to_patch is 'none'; use multiples of {stride} or pad_to_patch 'center'")
        blocks = _n_blocks(backbone)
        if blocks is not None:
            block_indices(cfg.blocks, cfg.layers, blocks)  # refuses more layers than blocks
        elif cfg.blocks != "last" and cfg.layers > 1:
            raise NotApplicable(f"depth_linear: blocks {cfg.blocks!r} needs the model's block count; "
                                f"{type(backbone).__name__} states none")
        return stride

    def check_data(self, train, val, stride: int) -> None:
        cfg = self.cfg
        d = train.load_depth(0)
        hh, ww = d.shape
        if cfg.fixed_crop == "kb" and (hh < cfg.kb_crop[0] or ww < cfg.kb_crop[1]):
            raise DataError(f"depth_linear: training frames {hh}x{ww} are smaller than the KB crop "
                            f"{cfg.kb_crop[0]}x{cfg.kb_crop[1]} (KITTI's raw frames are about 375x1242); "
                            f"give the raw frames or set kb_crop")
        y1, y2, x1, x2 = fixed_crop_box(hh, ww, cfg.fixed_crop, cfg.kb_crop)
        hh, ww = y2 - y1, x2 - x1
        h, w = cfg.random_crop
        if h > hh or w > ww:
            raise ConfigError(f"depth_linear: random_crop {h}x{w} is larger than the training images "
                              f"({hh}x{ww} after the {cfg.fixed_crop} crop); set random_crop (--set random_crop=[..])")
        vh, vw = val.load_depth(0).shape
        if cfg.eval_crop == "kb":
            if vh < cfg.kb_crop[0] or vw < cfg.kb_crop[1]:
                raise DataError(f"depth_linear: evaluation frames {vh}x{vw} are smaller than the KB crop "
                                f"{cfg.kb_crop[0]}x{cfg.kb_crop[1]}; give the raw frames or set kb_crop")
            vh, vw = cfg.kb_crop
        if cfg.eval_mask == "nyu_eigen" and not eigen_frame(vh, vw):
            raise DataError(f"depth_linear: no Eigen mask for {vh}x{vw} evaluation frames: the Eigen crop is "
                            f"defined on NYU's full 480x640 frame (or a uniform scaling of it); these look "
                            f"cropped or resized already. Give the full frames, or set eval_mask full")
        if cfg.pad_to_patch == "none" and (vh % stride or vw % stride):
            raise ConfigError(f"depth_linear: evaluation images {vh}x{vw} are not a multiple of the stride "
                              f"{stride} and pad_to_patch is 'none'; use pad_to_patch 'center' (DINOv3's)")

    # ------------------------------------------------------------------ model pieces
    def features(self, backbone, x: torch.Tensor, stride: int):
        """Per chosen block, its (B, D, h, w) patch grid and (B, D) class token. Blocks other
        than the last n come from the last n reaching back to the earliest one chosen."""
        cfg = self.cfg
        if cfg.pad_to_patch == "center":
            x = center_pad(x, stride)
        if cfg.blocks == "last" or cfg.layers == 1:
            f = backbone.get_features(x, n_last_blocks=cfg.layers, final_norm=cfg.final_norm)
            kept = range(f.patches.shape[1])
        else:
            n = _n_blocks(backbone)
            wanted = block_indices(cfg.blocks, cfg.layers, n)
            f = backbone.get_features(x, n_last_blocks=n - wanted[0], final_norm=cfg.final_norm)
            kept = [i - wanted[0] for i in wanted]
        patches = [f.patches[:, i].permute(0, 3, 1, 2).float() for i in kept]
        return patches, [f.cls[:, i].float() for i in kept]

    def predict(self, head, backbone, x: torch.Tensor, stride: int) -> torch.Tensor:
        cfg = self.cfg
        with torch.no_grad():
            patches, cls = self.features(backbone, x, stride)
        top = cfg.max_depth if cfg.bins_max_depth is None else cfg.bins_max_depth
        return logits_to_depth(head(patches, cls), cfg.min_depth, top, cfg.bins, cfg.bin_norm)

    def make_head(self, embed_dim: int) -> LinearDepthHead:
        cfg = self.cfg
        return LinearDepthHead([embed_dim] * cfg.layers, cfg.n_bins, cfg.batchnorm, cfg.cls_token,
                               upsample=cfg.upsample, conv_init=cfg.conv_init)

    # ------------------------------------------------------------------ run
    def run(self, model, data_root: Path) -> list[ProtocolResult]:
        t0 = time.perf_counter()
        head, val, stride, losses = self.fit(model, data_root)
        train_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        per_image = self.evaluate(head, model.backbone, val, stride, model.device)
        eval_s = time.perf_counter() - t0
        return [self.result(per_image, losses, train_s, eval_s, len(val))]

    def fit(self, model, data_root: Path):
        """(head, evaluation reader, stride, training losses): the checks, then the head trained."""
        cfg = self.cfg
        backbone = model.backbone
        stride = self.check_model(backbone)
        reader = DATASETS.get(cfg.dataset)
        extra = {"depth_scale": cfg.depth_scale, "max_depth": cfg.max_depth} if cfg.dataset in ("nyu", "kitti") else {}
        train, val = reader(data_root, cfg.train_split, **extra), reader(data_root, cfg.val_split, **extra)
        self.check_data(train, val, stride)
        backbone.eval()
        torch.manual_seed(cfg.seed)
        head = self.make_head(int(backbone.embed_dim)).to(model.device)
        return head, val, stride, self.train_head(head, backbone, train, stride, model.device)

    def examples(self, model, data_root: Path, count: int = 4, seed: int = 0) -> list[Example]:
        """Evaluation images drawn with ``seed``, after training the head as :meth:`run` does: the
        image as the model saw it, the ground-truth depth, the predicted depth (test-time flip as
        configured) and the absolute error inside the evaluation mask, captioned with its RMSE."""
        head, val, stride, _ = self.fit(model, data_root)
        head.eval()
        data, out = _EvalImages(val, self.cfg), []
        for i in chosen_items(len(val), count, seed):
            img, gt = data[i]
            pred = self.predict_image(head, model.backbone, img.to(model.device), stride).cpu()
            if pred.shape[-2:] != gt.shape[-2:]:
                pred = F.interpolate(pred, size=gt.shape[-2:], mode="bilinear", align_corners=False)
            scores = evaluate_prediction(pred, gt[None], min_depth=self.cfg.min_depth, max_depth=self.cfg.max_depth,
                                         eval_mask=self.cfg.eval_mask)
            truth, guess = gt[0].numpy().astype(np.float32), pred[0, 0].numpy().astype(np.float32)
            error = np.where(truth > 0, np.abs(guess - truth), np.nan).astype(np.float32)
            shown = np.concatenate([truth[truth > 0], guess.ravel()])
            scale = (float(shown.min()), float(shown.max()))  # one colour scale: truth and prediction compare
            out.append(Example(f"image {i}", [
                Panel("input", image=seen_by_model(img, self.cfg.norm_mean, self.cfg.norm_std)),
                Panel("ground truth", kind="values", image=truth, unit="m", value_range=scale),
                Panel("prediction", kind="values", image=guess, unit="m", text=f"RMSE {scores['RMSE']:.3f} m",
                      value_range=scale),
                Panel("|error|", kind="values", image=error, unit="m")]))
        return out

    @torch.no_grad()
    def predict_image(self, head, backbone, img: torch.Tensor, stride: int) -> torch.Tensor:
        """(1, 1, H, W) depth of one (3, H, W) image; with ``tta``, eval.py's inverse_tta_hook:
        (pred + hflip(pred of the flip)) / 2."""
        x = img[None]
        if self.cfg.tta:
            x = torch.cat([x, x.flip(-1)])
        pred = self.predict(head, backbone, x, stride)
        return (pred[:1] + pred[1:].flip(-1)) / 2 if self.cfg.tta else pred

    def train_head(self, head, backbone, train, stride: int, device) -> list[float]:
        cfg = self.cfg
        augment = TrainAugment(tuple(cfg.random_crop), cfg.fixed_crop, cfg.rotation, tuple(cfg.brightness),
                               cfg.colour_p, tuple(cfg.kb_crop))
        opt = torch.optim.AdamW(head.parameters(), lr=cfg.lr, betas=(cfg.max_momentum, cfg.beta2),
                                weight_decay=cfg.weight_decay)
        loss_fn = SILogLoss(cfg.silog_lambda, cfg.silog_warmup_iters)
        per_epoch = len(train) // cfg.batch_size
        if per_epoch == 0:
            raise ConfigError(f"depth_linear: batch_size {cfg.batch_size} exceeds the {len(train)} training images")
        head.train()
        losses, step, epoch = [], 0, 0
        while step < cfg.total_iters:
            order = np.random.default_rng([cfg.seed, epoch]).permutation(len(train)).tolist()
            loader = DataLoader(_TrainImages(train, augment, cfg.seed, epoch), batch_size=cfg.batch_size,
                                sampler=order, drop_last=True, num_workers=cfg.num_workers)
            for img, gt in loader:
                if step >= cfg.total_iters:
                    break
                losses.append(self.train_step(head, backbone, opt, loss_fn, img.to(device), gt.to(device), step,
                                              stride))
                step += 1
            epoch += 1
        return losses

    def train_step(self, head, backbone, opt, loss_fn, img, gt, step: int, stride: int) -> float:
        """One step of train.py's IterBasedTrainer.train_on_batch: pixels with depth 0 masked
        (eval_mask FULL in training), the prediction resized bilinearly to the crop."""
        cfg = self.cfg
        lr, beta1 = warmup_one_cycle(step, cfg.lr, cfg.total_iters, cfg.warmup_iters, div_factor=cfg.div_factor,
                                     final_div_factor=cfg.final_div_factor, base_momentum=cfg.base_momentum,
                                     max_momentum=cfg.max_momentum)
        set_schedule(opt, lr, beta1)
        valid = gt != 0
        opt.zero_grad(set_to_none=True)
        pred = self.predict(head, backbone, img, stride)
        if pred.shape[-2:] != gt.shape[-2:]:
            pred = F.interpolate(pred, size=gt.shape[-2:], mode="bilinear", align_corners=False)
        loss = loss_fn(pred, gt, valid)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(list(head.parameters()), cfg.grad_clip)
        opt.step()
        return float(loss.detach())

    @torch.no_grad()
    def evaluate(self, head, backbone, val, stride: int, device) -> dict[str, np.ndarray]:
        """Each evaluation image's metrics, one image (and its flip) at a time."""
        cfg = self.cfg
        head.eval()
        rows = []
        loader = DataLoader(_EvalImages(val, cfg), batch_size=1, num_workers=cfg.num_workers, collate_fn=_first)
        for img, gt in loader:
            pred = self.predict_image(head, backbone, img.to(device), stride)  # eval.py's inverse_tta_hook
            rows.append(evaluate_prediction(pred.cpu(), gt[None], min_depth=cfg.min_depth,
                                            max_depth=cfg.max_depth, eval_mask=cfg.eval_mask))
        return {m: np.array([r[m] for r in rows], dtype=np.float64) for m in rows[0]}

    def result(self, per_image: dict[str, np.ndarray], losses, train_s, eval_s, n_val) -> ProtocolResult:
        cfg = self.cfg
        keep = np.isfinite(per_image["RMSE"])  # eval.py's nanmean: images without valid pixels drop out
        if not keep.any():
            raise ConfigError("depth_linear: no evaluation image has a valid depth pixel inside the evaluation mask")
        metrics = {m: float(np.mean(per_image[m][keep])) for m in per_image}
        block = means_block({m: per_image[m][keep] for m in REPORTED}, scale=1.0)
        n_train_crops = cfg.total_iters * cfg.batch_size
        return ProtocolResult(
            metrics={m: metrics[m] for m in REPORTED}, dataset=cfg.dataset, split=cfg.val_split, seed=cfg.seed,
            params={"preset": cfg.preset, "other_metrics": {m: metrics[m] for m in metrics if m not in REPORTED},
                    "n_val_images": int(keep.sum()), "n_val_images_without_valid_pixels": int((~keep).sum()),
                    "final_loss": losses[-1] if losses else None, "n_train_crops": n_train_crops},
            cost={"train_s": train_s, "eval_s": eval_s,
                  "train_ms_per_crop": 1000 * train_s / max(1, n_train_crops),
                  "eval_ms_per_image": 1000 * eval_s / max(1, n_val)},
            per_image=block)


__all__ = ["Config", "PRESETS", "DepthLinear"]
