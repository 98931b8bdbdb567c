"""The fine-tuning run: iBOT's (BEiT's) ``run_class_finetuning.main`` loop (bytedance/ibot at
da316d8) on the harness's device, precision and process group.

AdamW over the layer-decay groups (harness.training.layer_decay), per-step cosine lr (warm-up from
0, ``warmup_epochs x steps``, to ``min_lr``; or DeiT's per-epoch / MAE's schedule,
benchmarks.finetune.schedules) and weight decay (``weight_decay`` to
``weight_decay_end``) from harness.schedules, SoftTargetCrossEntropy with mixup / cutmix,
LabelSmoothingCrossEntropy without (plain cross-entropy at smoothing 0), an optional EMA of the
weights, evaluation on the val split every ``eval_every`` epochs and after the last.
Under torchrun the model is wrapped in DistributedDataParallel and each process draws its share
of every micro-batch; every process evaluates the whole val split (the official default, without
``--dist_eval``).
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader

from benchmarks.finetune import data as ftdata
from benchmarks.finetune import resume as resume_file
from benchmarks.finetune import sampler as ra
from benchmarks.finetune import schedules
from benchmarks.finetune.config import per_device_batch
from benchmarks.finetune.step import micro_step
from harness.runtime import device as devices
from harness.runtime import distributed as dist
from harness.schedules import cosine_schedule
from harness.training.layer_decay import parameter_groups


def official_cosine(base: float, final: float, epochs: int, steps_per_epoch: int, warmup_epochs: int = 0,
                    warmup_steps: int = -1) -> np.ndarray:
    """``utils.cosine_scheduler`` (warm-up from 0; ``warmup_steps`` > 0 overrides the epochs)."""
    total = epochs * steps_per_epoch
    warm = warmup_steps if warmup_steps > 0 else warmup_epochs * steps_per_epoch
    return cosine_schedule(base, final, total, min(warm, total) if warmup_epochs > 0 or warmup_steps > 0 else 0)


def lr_schedule(cfg, steps_per_epoch: int) -> np.ndarray:
    """The peak lr's schedule, one value per optimisation step, as ``cfg.lr_schedule`` names it."""
    if cfg.lr_schedule == "per_epoch":
        return schedules.per_epoch_schedule(cfg.peak_lr(), cfg.min_lr, cfg.warmup_lr, cfg.epochs, cfg.warmup_epochs,
                                            steps_per_epoch)
    if cfg.lr_schedule == "mae":
        return schedules.mae_schedule(cfg.peak_lr(), cfg.min_lr, cfg.epochs, cfg.warmup_epochs, steps_per_epoch)
    return official_cosine(cfg.peak_lr(), cfg.min_lr, cfg.epochs, steps_per_epoch, cfg.warmup_epochs,
                           cfg.warmup_steps)


def steps_per_epoch(n_images: int, cfg) -> int:
    """Optimisation steps an epoch: ``n // batch`` (the loader's drop_last), or RASampler's
    ``floor(n / 256) x 256 // batch`` under repeated augmentation."""
    return ra.steps_per_epoch(n_images, cfg.batch_size) if cfg.repeated_aug else n_images // cfg.batch_size


def build_optimizer(model, cfg) -> torch.optim.Optimizer:
    groups = parameter_groups(model, cfg.weight_decay, cfg.layer_decay,
                              scheme=_scheme(model) if cfg.layer_decay < 1.0 else None,
                              skip_list=None if cfg.use_no_weight_decay_list else ())
    betas = tuple(cfg.opt_betas) if cfg.opt_betas is not None else (0.9, 0.999)
    return torch.optim.AdamW(groups, lr=cfg.peak_lr(), weight_decay=0.0, eps=cfg.opt_eps, betas=betas)


def _scheme(model):
    from harness.training.layer_decay import layer_scheme

    return layer_scheme(model, "backbone.")


def build_criterion(cfg):
    from timm.loss import LabelSmoothingCrossEntropy, SoftTargetCrossEntropy

    if cfg.mixup_active():
        return SoftTargetCrossEntropy()
    if cfg.smoothing > 0:
        return LabelSmoothingCrossEntropy(smoothing=cfg.smoothing)
    return torch.nn.CrossEntropyLoss()


def build_mixup(cfg, num_classes: int):
    if not cfg.mixup_active():
        return None
    from timm.data import Mixup

    return Mixup(mixup_alpha=cfg.mixup, cutmix_alpha=cfg.cutmix, cutmix_minmax=cfg.cutmix_minmax,
                 prob=cfg.mixup_prob, switch_prob=cfg.mixup_switch_prob, mode=cfg.mixup_mode,
                 label_smoothing=cfg.smoothing, num_classes=num_classes)


def build_ema(model, cfg):
    """timm's ModelEmaV3 without warm-up: ``ema = decay x ema + (1 - decay) x model`` for every
    float parameter and buffer at every optimisation step, as the official timm ``ModelEma``."""
    if not cfg.model_ema:
        return None
    from timm.utils import ModelEmaV3

    return ModelEmaV3(model, decay=cfg.model_ema_decay)


@dataclass
class Progress:
    """Where the run is, and what it has measured."""

    step: int = 0
    history: list[dict[str, Any]] = field(default_factory=list)
    trained_on: list[dict[str, Any]] = field(default_factory=list)
    session_start: int = 0
    # the training loss of every micro-batch since the last evaluation (the official MetricLogger's)
    train_loss_sum: float = 0.0
    train_loss_n: int = 0
    wait_s: float = 0.0
    train_s: float = 0.0
    eval_s: float = 0.0


@torch.no_grad()
def evaluate(model, dataset, cfg, device) -> dict[str, Any]:
    """Top-1 / top-5 (timm ``accuracy``) and the cross-entropy on the val split, with each image's
    top-1 and top-5 hit."""
    model.eval()
    loader = DataLoader(dataset, batch_size=cfg.eval_batch_size, shuffle=False, num_workers=cfg.num_workers)
    hits1, hits5, loss_sum = [], [], 0.0
    for images, targets in loader:
        images, targets = images.to(device), targets.to(device)
        with devices.autocast(device, cfg.precision):
            logits = model(images)
        loss_sum += float(torch.nn.functional.cross_entropy(logits.float(), targets, reduction="sum"))
        k = min(5, logits.shape[1])
        top = logits.float().topk(k, dim=1).indices
        hits1.append((top[:, 0] == targets).cpu())
        hits5.append((top == targets[:, None]).any(1).cpu())
    h1, h5 = torch.cat(hits1).numpy(), torch.cat(hits5).numpy()
    return {"top1": float(h1.mean() * 100.0), "top5": float(h5.mean() * 100.0), "loss": loss_sum / len(h1),
            "hits1": h1, "hits5": h5}


def _fault_injection(step: int) -> None:
    """Tests kill the process hard after a given optimisation step to prove exact resume."""
    kill_after = os.environ.get("SSL_BENCH_FAULT_KILL_AFTER_STEP")
    if kill_after and step == int(kill_after):
        import signal

        os.kill(os.getpid(), signal.SIGKILL)


class FinetuneRun:
    """One fine-tuning run of a classifier on (train, val) datasets of seeded transformed images."""

    def __init__(self, classifier, train_set, val_set, num_classes: int, cfg, device, resume_path: Path,
                 identity: str):
        self.cfg, self.device, self.resume_path, self.identity = cfg, device, resume_path, identity
        self.train_set, self.val_set = train_set, val_set
        self.world, self.rank = dist.world_size(), dist.rank()
        self.micro = per_device_batch(cfg, self.world)
        self.classifier = classifier.to(device)
        dist.broadcast_module(self.classifier)
        ids = [device.index] if device.type == "cuda" else None
        # find_unused_parameters as the official script (a final norm set aside by mean pooling)
        self.model = (DistributedDataParallel(self.classifier, device_ids=ids, find_unused_parameters=True)
                      if dist.is_dist() else self.classifier)
        self.optimizer = build_optimizer(self.classifier, cfg)
        self.scaler = devices.grad_scaler(device, cfg.precision)
        self.criterion = build_criterion(cfg)
        self.mixup = build_mixup(cfg, num_classes)
        self.ema = build_ema(self.classifier, cfg)
        self.steps_per_epoch = steps_per_epoch(len(train_set), cfg)
        self.total_steps = cfg.epochs * self.steps_per_epoch
        self.stop_step = min(self.total_steps, cfg.max_steps or self.total_steps)
        self.lr = lr_schedule(cfg, self.steps_per_epoch)
        wd_end = cfg.weight_decay if cfg.weight_decay_end is None else cfg.weight_decay_end
        self.wd = official_cosine(cfg.weight_decay, wd_end, cfg.epochs, self.steps_per_epoch)
        self.progress = Progress()
        self.last_eval: dict[str, Any] | None = None

    # ------------------------------------------------------------------ resume
    def try_resume(self, source: Path | None = None) -> bool:
        """Go on from ``source`` (default: this run's own resume.pt, when there is one)."""
        source = source or self.resume_path
        if not source.is_file():
            return False
        state = resume_file.load(source, self.identity)
        self.classifier.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.scaler.load_state_dict(state["scaler"])
        if self.ema is not None and "ema" in state:
            self.ema.module.load_state_dict(state["ema"])
        p = self.progress
        p.step = p.session_start = int(state["step"])
        p.history, p.trained_on = state["history"], state["trained_on"]
        # the file holds every process's sum: one process carries it on, so that the next one counts it once
        p.train_loss_sum, p.train_loss_n = state["train_loss"] if dist.is_main() else (0.0, 0)
        resume_file.set_rng_state(state["rng"])
        return True

    def train_loss_totals(self) -> tuple[float, int]:
        """The training losses since the last evaluation, summed over every process (the official
        MetricLogger's ``synchronize_between_processes``): (sum, count)."""
        p = self.progress
        t = dist.all_reduce_sum(torch.tensor([p.train_loss_sum, p.train_loss_n], dtype=torch.float64,
                                             device=self.device))
        return float(t[0]), int(t[1])

    def save_resume(self) -> None:
        train_loss = self.train_loss_totals()  # a collective: every process, before rank 0 writes
        if dist.is_main():
            resume_file.save(self.resume_path, identity=self.identity, model=self.classifier,
                             optimizer=self.optimizer, scaler=self.scaler, ema=self.ema, step=self.progress.step,
                             history=self.progress.history, trained_on=self.trained_on(),
                             train_loss=train_loss)
        dist.barrier()

    def trained_on(self) -> list[dict]:
        here = {**devices.device_record(self.device, self.cfg.precision, self.world),
                "update_freq": self.cfg.update_freq, "from_step": self.progress.session_start,
                "to_step": self.progress.step}
        return self.progress.trained_on + [here]

    # ------------------------------------------------------------------ loop
    def loader(self, epoch: int, start_micro: int) -> DataLoader:
        cfg = self.cfg
        self.train_set.set_epoch(epoch)
        if cfg.repeated_aug:
            batches = ra.micro_batches(len(self.train_set), cfg.batch_size, cfg.update_freq, epoch)
            mine = [ra.rank_share(b, self.rank, self.world) for b in batches[start_micro:]]
        else:
            batches = ftdata.epoch_micro_batches(len(self.train_set), cfg.batch_size, cfg.update_freq, cfg.seed, epoch)
            mine = [ftdata.rank_share(b, self.rank, self.world) for b in batches[start_micro:]]
        return DataLoader(self.train_set, batch_sampler=mine, num_workers=cfg.num_workers,
                          pin_memory=devices.pin_memory(self.device),
                          generator=torch.Generator().manual_seed(cfg.seed + epoch))

    def train(self, bar=None) -> None:
        p, cfg = self.progress, self.cfg
        while p.step < self.stop_step:
            epoch = p.step // self.steps_per_epoch
            self._train_epoch(epoch, (p.step - epoch * self.steps_per_epoch) * cfg.update_freq, bar)
            ended = p.step == (epoch + 1) * self.steps_per_epoch
            if ended and ((epoch + 1) % cfg.eval_every == 0 or p.step == self.total_steps):
                self._evaluate(epoch)
            if ended or p.step == self.stop_step:
                self.save_resume()

    def _train_epoch(self, epoch: int, start_micro: int, bar) -> None:
        p, cfg = self.progress, self.cfg
        self.model.train()
        micro_index = start_micro
        t0 = time.perf_counter()
        for images, targets in self.loader(epoch, start_micro):
            got = time.perf_counter()
            p.wait_s += got - t0
            images, targets = images.to(self.device, non_blocking=True), targets.to(self.device, non_blocking=True)
            update = (micro_index + 1) % cfg.update_freq == 0
            out = micro_step(self.model, self.criterion, self.optimizer, images, targets,
                             lr=float(self.lr[p.step]), weight_decay=float(self.wd[p.step]), mixup=self.mixup,
                             scaler=self.scaler, precision=cfg.precision, update_freq=cfg.update_freq,
                             update=update, clip_grad=cfg.clip_grad, ema=self.ema, no_sync=True)
            micro_index += 1
            p.train_loss_sum += out.loss
            p.train_loss_n += 1
            t0 = time.perf_counter()
            p.train_s += t0 - got
            if not out.updated:
                continue
            p.step += 1
            if bar is not None:
                bar.update(1)
                bar.set_postfix(loss=f"{out.loss:.4f}", epoch=epoch)
            if cfg.resume_every and p.step % cfg.resume_every == 0 and p.step < self.stop_step:
                self.save_resume()
            _fault_injection(p.step)
            if p.step >= self.stop_step:
                break

    def final_evaluation(self) -> dict[str, Any]:
        """The evaluation of the weights the run ends with: the last epoch's, or one made now (a
        run stopped by ``max_steps`` inside an epoch gets a history row for it; a run found already
        finished in its resume file is evaluated again without one)."""
        p = self.progress
        if not p.history or p.history[-1]["step"] != p.step:
            self._evaluate(p.step // max(self.steps_per_epoch, 1))
        elif self.last_eval is None:
            self.last_eval = evaluate(self.classifier, self.val_set, self.cfg, self.device)
        return self.last_eval

    def _evaluate(self, epoch: int) -> None:
        t0 = time.perf_counter()
        result = evaluate(self.classifier, self.val_set, self.cfg, self.device)
        p = self.progress
        loss_sum, loss_n = self.train_loss_totals()
        row = {"epoch": epoch, "step": p.step, "top1": result["top1"], "top5": result["top5"],
               "loss": result["loss"], "lr": float(self.lr[p.step - 1]),
               "train_loss": loss_sum / loss_n if loss_n else None}
        p.train_loss_sum, p.train_loss_n = 0.0, 0
        if self.ema is not None:
            ema = evaluate(self.ema.module, self.val_set, self.cfg, self.device)
            row.update(top1_ema=ema["top1"], top5_ema=ema["top5"])
        self.progress.history.append(row)
        self.last_eval = result
        self.progress.eval_s += time.perf_counter() - t0
