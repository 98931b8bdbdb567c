"""What Probe3D's dense probes on frozen features share (El Banani et al., CVPR 2024; mbanani/probe3d
at a1f1464; train_snorm.py and train_depth.py with configs/probe/{snorm,depth}_dpt.yaml), on NYU
Depth v2 in Probe3D's layout or on NAVI: the settings, the checks, the training loop and the
evaluation. A task (surface normals, binned depth) adds its output size, prediction, loss, metrics
and example panels.

A DPT probe (dpt_head.py) reads four blocks of the frozen backbone (dpt_features.py), is trained for
10 epochs of batch 8 on ``trainval`` with AdamW (lr 5e-4, torch's defaults otherwise) under a cosine
schedule with 1.5 warm-up epochs (dpt_training.py), its output resized to the target (by the task)
with corners aligned, and evaluated on the 654 test frames as the mean over frames of each frame's
metrics. Presets *_navi run the same probes on NAVI (harness/data/navi_probe3d.py) as Probe3D's
configs/dataset/navi.yaml.

Kept quirks of the official code: the training loader does not shuffle (build_loader shuffles the
split named "train" only, and the probes train on "trainval"; the setting ``shuffle`` turns it on);
the padding added to fit the stride is not cut from the output before it is resized to the target
(features.py ``center_padding``).

Memory: frames are read and passed through the backbone one batch at a time; no feature is kept
beyond its batch.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import numpy as np
import torch
from torch.utils.data import DataLoader

from harness.data.transforms import IMAGENET_MEAN, IMAGENET_STD
from harness.errors import NotApplicable
from harness.examples import Example, Panel, chosen_items, seen_by_model
from harness.per_image import means_block
from harness.probes.dpt_features import block_features, chosen_blocks
from harness.probes.dpt_head import DPTHead
from harness.probes.dpt_training import Frames, schedule_factor
from harness.protocol import Protocol, ProtocolResult
from harness.registry import DATASETS


@dataclass
class Config:
    dataset: str = "nyu:probe3d"            # the probe3d layout of NYUv2 (reader nyu_probe3d)
    train_split: str = "trainval"          # train_snorm.py / train_depth.py build_loader(.., "trainval")
    val_split: str = "test"
    preset: str | None = None
    # --- features (evals/models/*.py with return_multilayer=True)
    blocks: list[int] | None = None        # None: [n//4-1, n//2-1, 3n//4-1, n-1]
    readout: Literal["dense", "dense_cls"] = "dense"   # configs/backbone/*.yaml output
    # --- probe (configs/probe/{snorm,depth}_dpt.yaml)
    hidden_dim: int = 512
    kernel_size: int = 3
    uncertainty_aware: bool = True         # normals: a fourth channel, kappa
    n_bins: int = 256                      # depth: bindepth
    min_depth: float = 0.001
    max_depth: float = 10.0
    bin_norm: Literal["linear", "softmax", "sigmoid"] = "linear"
    loss_max_depth: float = 10.0           # DepthLoss(): ground truth beyond it is ignored (max_depth=10)
    # --- optimisation (configs/optimizer/ten_epoch.yaml; *_training.yaml batch_size)
    lr: float = 5e-4
    weight_decay: float = 0.01             # torch.optim.AdamW's default, not set by Probe3D
    epochs: int = 10
    warmup_epochs: float = 1.5
    min_factor: float = 0.01
    batch_size: int = 8
    shuffle: bool = False                  # quirk kept: the "trainval" loader is not shuffled
    # --- data (configs/dataset/nyu.yaml; nyu.py)
    center_crop: bool = True
    augment: bool = True
    jitter_after_normalize: bool = False   # NAVI's transforms insert the jitter after Normalize
    navi_frame_size: int = 512             # navi.py image_size (512, 512)
    jitter: float = 0.2
    jitter_p: float = 0.8
    resized_crop_p: float = 0.5
    resized_crop_scale: list[float] = field(default_factory=lambda: [0.5, 1.0])
    norm_mean: list[float] = field(default_factory=lambda: list(IMAGENET_MEAN))
    norm_std: list[float] = field(default_factory=lambda: list(IMAGENET_STD))
    seed: int = 8                          # *_training.yaml system.random_seed
    # --- execution (not in the fingerprint)
    eval_batch_size: int = 8
    num_workers: int = 0
    progress: bool = True

    def __post_init__(self):
        checks = [
            (self.epochs >= 1 and 0 < self.warmup_epochs < self.epochs,
             f"need 0 < warmup_epochs < epochs, found {self.warmup_epochs}, {self.epochs}"),
            (self.batch_size >= 1 and self.eval_batch_size >= 1, "batch sizes must be >= 1"),
            (self.hidden_dim >= 1 and self.kernel_size % 2 == 1, "hidden_dim >= 1 and an odd kernel_size"),
            (0 < self.min_depth < self.max_depth, "need 0 < min_depth < max_depth"),
            (len(self.resized_crop_scale) == 2 and 0 < self.resized_crop_scale[0] <= self.resized_crop_scale[1] <= 1,
             f"resized_crop_scale needs (low, high) in (0, 1], found {self.resized_crop_scale}"),
            (self.blocks is None or len(self.blocks) == 4, f"blocks names four blocks, found {self.blocks}"),
        ]
        for ok, msg in checks:
            if not ok:
                raise ValueError(msg)


class DPTProbe(Protocol):
    """What both probes share: the checks, the features, the training loop, the evaluation."""

    NOT_IN_FINGERPRINT = ("eval_batch_size", "num_workers", "progress")
    REPORTED: tuple[str, ...] = ()  # the declared metrics, in the per-image block's order

    # ------------------------------------------------------------------ pieces each task defines
    def out_dim(self) -> int:
        raise NotImplementedError

    def predict(self, head, feats, size) -> torch.Tensor:
        raise NotImplementedError

    def loss(self, pred, depth, normals) -> torch.Tensor:
        raise NotImplementedError

    def metrics(self, pred, depth, normals) -> dict[str, torch.Tensor]:
        raise NotImplementedError

    # ------------------------------------------------------------------ checks before any work
    def check_model(self, backbone, model_name: str | None = None) -> list[int]:
        name = self.registry_name
        if not callable(getattr(backbone, "get_features", None)) or not isinstance(
                getattr(backbone, "patch_size", None), int):
            raise NotApplicable(f"{name} trains a probe on a ViT's patch grids; {type(backbone).__name__} gives none")
        n = len(backbone.blocks) if hasattr(backbone, "blocks") else getattr(backbone, "num_blocks", None)
        if not isinstance(n, int):
            raise NotApplicable(f"{name}: {type(backbone).__name__} states no block count")
        return chosen_blocks(self.cfg.blocks, n, name, model_name)

    def readers(self, data_root: Path):
        cfg = self.cfg
        reader = DATASETS.get(cfg.dataset)
        extra = {"frame_size": cfg.navi_frame_size} if cfg.dataset == "navi_probe3d" else {}
        train = reader(data_root, cfg.train_split, max_depth=cfg.max_depth, **extra)
        return train, reader(data_root, cfg.val_split, max_depth=cfg.max_depth, **extra)

    def features(self, backbone, images, blocks) -> list[torch.Tensor]:
        with torch.no_grad():
            return block_features(backbone, images, blocks, self.cfg.readout)

    # ------------------------------------------------------------------ run
    def run(self, model, data_root: Path) -> list[ProtocolResult]:
        t0 = time.perf_counter()
        head, blocks, train, val, losses = self.fit(model, data_root)
        train_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        per_image = self.evaluate(head, model.backbone, blocks, val, model.device)
        eval_s = time.perf_counter() - t0
        return [self.result(per_image, losses, blocks, train_s, eval_s, len(train))]

    def fit(self, model, data_root: Path):
        """(head, blocks, training reader, evaluation reader, losses): the checks, then the probe trained."""
        cfg = self.cfg
        backbone = model.backbone
        blocks = self.check_model(backbone, model.name)
        train, val = self.readers(Path(data_root))
        backbone.eval()
        torch.manual_seed(cfg.seed)
        dims = [int(backbone.embed_dim) * (2 if cfg.readout == "dense_cls" else 1)] * 4
        head = DPTHead(dims, self.out_dim(), cfg.hidden_dim, cfg.kernel_size).to(model.device)
        return head, blocks, train, val, self.train_head(head, backbone, blocks, train, model.device)

    def examples(self, model, data_root: Path, count: int = 4, seed: int = 0) -> list[Example]:
        """Test frames drawn with ``seed``, after training the probe as :meth:`run` does: the frame as
        the model saw it, the truth, the prediction and its error, captioned with the frame's headline."""
        head, blocks, _, val, _ = self.fit(model, data_root)
        head.eval()
        frames, out = Frames(val, self.cfg), []
        for i in chosen_items(len(val), count, seed):
            img, depth, normals = frames[i]
            with torch.no_grad():
                feats = self.features(model.backbone, img[None].to(model.device), blocks)
                pred = self.predict(head, feats, depth.shape[-2:]).cpu()
            shown = seen_by_model(img, self.cfg.norm_mean, self.cfg.norm_std)
            out.append(Example(f"frame {i}", [Panel("input", image=shown),
                                               *self.panels(pred, depth[None], normals[None])]))
        return out

    def panels(self, pred, depth, normals) -> list[Panel]:
        raise NotImplementedError

    def train_head(self, head, backbone, blocks, train, device) -> list[float]:
        cfg = self.cfg
        steps_per_epoch = -(-len(train) // cfg.batch_size)  # drop_last False
        opt = torch.optim.AdamW(head.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
        total, warmup = cfg.epochs * steps_per_epoch, cfg.warmup_epochs * steps_per_epoch
        head.train()
        losses, step = [], 0
        for epoch in range(cfg.epochs):
            order = (np.random.default_rng([cfg.seed, epoch]).permutation(len(train)).tolist() if cfg.shuffle
                     else list(range(len(train))))
            loader = DataLoader(Frames(train, cfg, epoch), batch_size=cfg.batch_size, sampler=order,
                                num_workers=cfg.num_workers)
            for img, depth, normals in loader:
                img, depth, normals = img.to(device), depth.to(device), normals.to(device)
                lr = cfg.lr * schedule_factor(step, total, warmup, cfg.min_factor)
                losses.append(self.train_step(head, opt, self.features(backbone, img, blocks), depth, normals, lr))
                step += 1
        return losses

    def train_step(self, head, opt, feats, depth, normals, lr: float) -> float:
        """One batch of train_snorm.py / train_depth.py train(): the step's lr (LambdaLR's value
        at this step), the prediction resized to the target, the loss, one AdamW step."""
        for group in opt.param_groups:
            group["lr"] = lr
        opt.zero_grad()
        loss = self.loss(self.predict(head, feats, depth.shape[-2:]), depth, normals)
        loss.backward()
        opt.step()
        return float(loss.detach())

    @torch.no_grad()
    def evaluate(self, head, backbone, blocks, val, device) -> dict[str, np.ndarray]:
        head.eval()
        rows: dict[str, list[np.ndarray]] = {}
        loader = DataLoader(Frames(val, self.cfg), batch_size=self.cfg.eval_batch_size,
                            num_workers=self.cfg.num_workers)
        for img, depth, normals in loader:
            img, depth, normals = img.to(device), depth.to(device), normals.to(device)
            pred = self.predict(head, self.features(backbone, img, blocks), depth.shape[-2:])
            for m, v in self.metrics(pred, depth, normals).items():
                rows.setdefault(m, []).append(v.double().cpu().numpy())
        return {m: np.concatenate(v) for m, v in rows.items()}

    def scale(self, metric: str) -> float:
        return 1.0

    def result(self, per_image, losses, blocks, train_s, eval_s, n_train) -> ProtocolResult:
        cfg = self.cfg
        values = {m: per_image[m] * self.scale(m) for m in self.REPORTED}
        others = {m: float((v * self.scale(m.removesuffix("_aligned"))).mean()) for m, v in per_image.items()
                  if m not in values}
        steps = len(losses)
        return ProtocolResult(
            metrics={m: float(v.mean()) for m, v in values.items()}, dataset=cfg.dataset, split=cfg.val_split,
            seed=cfg.seed,
            params={"preset": cfg.preset, "blocks": blocks, "n_val_images": int(len(per_image[self.REPORTED[0]])),
                    "n_train_images": n_train, "steps": steps, "final_loss": losses[-1] if losses else None,
                    "other_metrics": others},
            cost={"train_s": train_s, "eval_s": eval_s, "train_ms_per_step": 1000 * train_s / max(1, steps)},
            per_image=means_block(values, scale=1.0))


__all__ = ["Config", "DPTProbe"]
