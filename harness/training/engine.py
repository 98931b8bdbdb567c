"""The pretraining engine: one loop for every method.

The engine owns what all methods share: AdamW with a warm-up + cosine learning rate
scaled by batch/256, cosine weight decay on weights only (not biases or norms), the
teacher's cosine EMA momentum, per-parameter gradient clipping and freezing the last
head layer during the first epochs (as DINO/iBOT), checkpoints with exact resume, a
progress bar, a JSON-lines log and data-parallel training under torchrun.

Determinism: batches are drawn from a permutation seeded by (seed, epoch), each
sample's augmentation is seeded by (seed, epoch, index) inside the method's dataset,
and the global torch RNG (drop-path) is saved in every checkpoint, so a run killed
and resumed reaches the same weights as an uninterrupted one.
"""
from __future__ import annotations

import json
import math
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader
from tqdm.auto import tqdm

from harness.runtime import device as devices
from harness.runtime import distributed as dist
from harness.models.checkpoints import save_checkpoint
from harness.config import fingerprint, from_dict, to_dict
from harness.errors import ConfigError, FolderLockedError
from harness.io_utils import FolderLock, atomic_write
from harness.method import BackboneConfig, Method, StepInfo
from harness.registry import METHODS
from harness.schedules import cosine_schedule
from harness.training.loggers import DEFAULT_LOGGERS, TrainLoggers, check_names


@dataclass
class TrainConfig:
    epochs: int = 100
    max_steps: int | None = None  # stop after this many steps (schedules still span `epochs`)
    batch_size: int = 64  # global batch over all processes
    lr: float = 5e-4  # base learning rate for a batch of 256 (scaled linearly)
    min_lr: float = 1e-6
    warmup_epochs: float = 10.0
    weight_decay: float = 0.04
    weight_decay_end: float = 0.4
    clip_grad: float = 3.0  # per-parameter gradient-norm clip (0 = off), as DINO/iBOT
    freeze_last_layer: int = 1  # epochs during which the head's last layer gets no update
    momentum_teacher: float = 0.996
    momentum_teacher_end: float = 1.0
    seed: int = 0
    num_workers: int = 0  # DataLoader worker processes decoding and augmenting the next batches
    checkpoint_every: int = 200  # steps; a checkpoint is also written at the end
    log_every: int = 10
    # fp16: autocast + gradient scaler, as the official --use_fp16; bf16: autocast, no scaler
    precision: str = "fp32"
    device: str = "auto"  # auto | cpu | cuda | cuda:N (under torchrun: each process its LOCAL_RANK GPU)
    # where the logged rows go: jsonl (<out>/log.jsonl), tensorboard, wandb, mlflow (harness/training/loggers.py)
    loggers: list[str] = field(default_factory=lambda: list(DEFAULT_LOGGERS))


@dataclass
class PretrainConfig:
    method: dict[str, Any] = field(default_factory=dict)  # {"name": ..., method Config fields}
    backbone: BackboneConfig = field(default_factory=BackboneConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    data: dict[str, Any] = field(default_factory=dict)  # {"root": ..., "name": ...}


def build_method(cfg: PretrainConfig, source: str = "<config>") -> Method:
    spec = dict(cfg.method)
    name = spec.pop("name", None)
    if not name:
        raise ConfigError(f"{source}: the method section needs a 'name' (one of {METHODS.names()})")
    cls = METHODS.get(name)
    method_cfg = from_dict(cls.Config, spec, source, "method")
    return cls(method_cfg, cfg.backbone)


def param_groups(method: Method, weight_decay: float) -> list[dict]:
    """Weights get weight decay; biases and norm parameters (ndim <= 1) do not."""
    decay, no_decay = [], []
    for name, p in method.trainable_parameters():
        (no_decay if p.ndim <= 1 or name.endswith(".bias") else decay).append(p)
    return [{"params": decay, "weight_decay": weight_decay, "apply_wd": True},
            {"params": no_decay, "weight_decay": 0.0, "apply_wd": False}]


def clip_per_parameter(params, clip: float) -> None:
    for p in params:
        if p.grad is not None:
            norm = p.grad.detach().norm(2)
            coef = clip / (norm + 1e-6)
            if coef < 1:
                p.grad.mul_(coef)


class EpochBatches:
    """This rank's share of each global batch of one epoch (drop-last), seeded by (seed, epoch).

    The global batch is split into contiguous per-rank chunks, so N processes see
    exactly the samples one process would see with the same global batch."""

    def __init__(self, global_batches: list[list[int]], start: int = 0):
        ws, r = dist.world_size(), dist.rank()
        self.batches = []
        for gb in global_batches[start:]:
            per = len(gb) // ws
            self.batches.append(gb[r * per:(r + 1) * per])

    def __iter__(self):
        return iter(self.batches)

    def __len__(self):
        return len(self.batches)


def global_batches(method: Method, dataset, epoch: int, batch_size: int, seed: int) -> list[list[int]]:
    custom = getattr(method, "global_batches", None)
    if custom is not None:
        return custom(dataset, epoch, batch_size, seed)
    g = torch.Generator().manual_seed(seed * 100003 + epoch)
    perm = torch.randperm(len(dataset), generator=g).tolist()
    return [perm[i:i + batch_size] for i in range(0, len(perm) - batch_size + 1, batch_size)]


class Trainer:
    def __init__(self, cfg: PretrainConfig, out_dir: Path, source: str = "<config>",
                 progress: bool = True):
        self.cfg, self.out_dir, self.progress = cfg, Path(out_dir), progress
        t = cfg.train
        if t.batch_size % dist.world_size():
            raise ConfigError(f"train.batch_size {t.batch_size} is not divisible by the "
                              f"{dist.world_size()} processes")
        data_root = cfg.data.get("root")
        if not data_root:
            raise ConfigError(f"{source}: data.root is required for pretraining")
        self.device = devices.prepare(devices.resolve_device(t.device), t.precision, backward=True)
        torch.manual_seed(t.seed)
        self.method = build_method(cfg, source)
        if dist.is_dist() and self.device.type == "cuda":
            # the official code syncs head BatchNorm statistics over all GPUs (gloo has no SyncBN)
            self.method = nn.SyncBatchNorm.convert_sync_batchnorm(self.method)
        self.method.to(self.device)
        dist.broadcast_module(self.method)
        self.model = self._distributed(self.method)
        self.dataset = self.method.build_dataset(Path(data_root), t.seed)
        if len(self.dataset) < t.batch_size:
            raise ConfigError(f"dataset has {len(self.dataset)} samples, fewer than one batch "
                              f"of {t.batch_size}")
        self.steps_per_epoch = len(global_batches(self.method, self.dataset, 0, t.batch_size, t.seed))
        self.total_steps = t.epochs * self.steps_per_epoch
        self.stop_step = min(self.total_steps, t.max_steps or self.total_steps)
        lr = t.lr * t.batch_size / 256.0
        warm = int(round(t.warmup_epochs * self.steps_per_epoch))
        self.lr_schedule = cosine_schedule(lr, t.min_lr, self.total_steps, min(warm, self.total_steps))
        self.wd_schedule = cosine_schedule(t.weight_decay, t.weight_decay_end, self.total_steps)
        self.momentum_schedule = cosine_schedule(t.momentum_teacher, t.momentum_teacher_end,
                                                 self.total_steps)
        self.params = [p for _, p in self.method.trainable_parameters()]
        self.last_layer = [p for n, p in self.method.trainable_parameters()
                           if self.method.is_last_layer(n)]
        self.optimizer = torch.optim.AdamW(param_groups(self.method, t.weight_decay), lr=lr)
        self.scaler = devices.grad_scaler(self.device, t.precision)
        self.step = 0
        # what trained each stretch of a resumed run (another GPU, precision or world size)
        self.trained_on: list[dict] = []
        self.session_start = 0
        self.log_path = self.out_dir / "log.jsonl"
        check_names(t.loggers, f"{source}: train.loggers")
        self.loggers: TrainLoggers | None = None  # opened by train(), on the main process

    def _distributed(self, method: Method) -> nn.Module:
        """The method wrapped in DistributedDataParallel under torchrun (gradients averaged
        in buckets overlapping the backward), or the method itself in one process."""
        if not dist.is_dist():
            return method
        # Buffers (centres, CrIBo's memory bank) are kept equal by the methods' own
        # all-reduces and all-gathers; broadcasting them every step would only cost time.
        return DistributedDataParallel(method, device_ids=[self.device.index] if self.device.type == "cuda" else None,
                                       forward_sync_buffers=False,
                                       find_unused_parameters=method.ddp_find_unused_parameters)

    # ------------------------------------------------------------------ checkpoints
    # Settings that do not change the trajectory: a run may resume with other values
    # (e.g. a larger max_steps continues the same schedule).
    RESUMABLE_CHANGES = ("max_steps", "checkpoint_every", "log_every", "num_workers", "device", "loggers")

    def _identity(self) -> str:
        d = to_dict(self.cfg)
        for k in self.RESUMABLE_CHANGES:
            d["train"].pop(k, None)
        return json.dumps(d, sort_keys=True)

    @property
    def resume_path(self) -> Path:
        return self.out_dir / "resume.pt"

    def save_resume(self) -> None:
        if not dist.is_main():
            return
        state = {"method": self.method.state_dict(), "optimizer": self.optimizer.state_dict(),
                 "step": self.step, "torch_rng": torch.get_rng_state(),
                 "scaler": self.scaler.state_dict(), "config": self._identity(),
                 "trained_on": json.dumps(self._trained_on())}
        if self.device.type == "cuda":  # drop-path draws on the GPU come from its own generator
            state["cuda_rng"] = torch.cuda.get_rng_state(self.device)
        atomic_write(self.resume_path, lambda p: torch.save(state, p))

    def try_resume(self) -> bool:
        if not self.resume_path.is_file():
            return False
        # weights-only: the resume file holds only tensors, numbers and strings
        try:
            state = torch.load(self.resume_path, map_location="cpu", weights_only=True)
        except Exception as exc:  # truncated or corrupt: torch raises several types
            why = (str(exc).splitlines() or [""])[0].split(". ")[0]
            raise ConfigError(f"{self.resume_path} cannot be read ({type(exc).__name__}: {why}); it is damaged "
                              "(e.g. truncated): delete it to start over, or use another --out") from exc
        if state["config"] != self._identity():
            raise ConfigError(f"{self.resume_path} was written by a different configuration; "
                              "use another output directory or delete it to start over")
        self.method.load_state_dict(state["method"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.step = self.session_start = int(state["step"])
        self.trained_on = json.loads(state.get("trained_on", "[]"))
        torch.set_rng_state(state["torch_rng"])
        if state.get("scaler"):
            self.scaler.load_state_dict(state["scaler"])
        if self.device.type == "cuda" and "cuda_rng" in state:
            torch.cuda.set_rng_state(state["cuda_rng"], self.device)
        self._truncate_log(self.step)
        return True

    def _truncate_log(self, step: int) -> None:
        """Drop log rows written after the checkpoint we resume from (they will be redone)."""
        if not dist.is_main() or not self.log_path.is_file():
            return
        rows = [r for r in self.log_path.read_text().splitlines() if r and json.loads(r)["step"] <= step]
        atomic_write(self.log_path, lambda p: p.write_text("".join(r + "\n" for r in rows)))

    def _trained_on(self) -> list[dict]:
        """One device record per stretch of training, with its steps [from_step, to_step)."""
        here = {**devices.device_record(self.device, self.cfg.train.precision, dist.world_size()),
                "from_step": self.session_start, "to_step": self.step}
        return self.trained_on + [here]

    def export(self) -> Path:
        cfg = self.cfg
        meta = {"method": cfg.method.get("name"), "arch": cfg.backbone.arch,
                "arch_kwargs": self.method.teacher.backbone.arch_kwargs,
                "pretrain_data": cfg.data.get("name") or str(cfg.data.get("root")),
                "epochs": self.step / self.steps_per_epoch, "steps": self.step,
                "config": to_dict(cfg), "config_fingerprint": fingerprint(to_dict(cfg)),
                "trained_on": self._trained_on()}
        weights = {k: v.cpu() for k, v in self.method.export_backbone().items()}
        return save_checkpoint(self.out_dir / "backbone", weights, meta)

    # ------------------------------------------------------------------ loop
    def _set_hparams(self, step: int) -> None:
        for g in self.optimizer.param_groups:
            g["lr"] = float(self.lr_schedule[step])
            if g.get("apply_wd"):
                g["weight_decay"] = float(self.wd_schedule[step])

    def _log(self, row: dict) -> None:
        if self.loggers is not None:
            self.loggers.log(row)

    def train(self) -> Path:
        lock = self._lock_out_dir()
        try:
            return self._train_locked()
        finally:
            if lock is not None:
                lock.release()

    def _lock_out_dir(self) -> FolderLock | None:
        """The output folder's lock, held by the main process for the whole run: two runs into
        one folder would both resume from it and both append to log.jsonl. Every rank learns
        whether it was taken (one all-reduce) and fails with it, so no rank waits in a
        collective for a main process that has stopped."""
        lock, error = None, None
        if dist.is_main():
            try:
                lock = FolderLock(self.out_dir, "pretraining").acquire()
            except FolderLockedError as exc:
                error = exc
        failed = dist.all_reduce_sum(torch.tensor([0.0 if error is None else 1.0], device=self.device))
        if error is not None:
            raise error
        if failed.item():
            raise FolderLockedError(f"{self.out_dir} is in use by another pretraining (the main process "
                                    f"could not lock it; its error names the holder)")
        return lock

    def _train_locked(self) -> Path:
        t = self.cfg.train
        self.out_dir.mkdir(parents=True, exist_ok=True)
        resumed = self.try_resume()
        if not resumed and dist.is_main():
            self.log_path.unlink(missing_ok=True)
        if dist.is_main():
            self.loggers = TrainLoggers(t.loggers, self.out_dir, f"{self.cfg.method.get('name')}-{self.out_dir.name}",
                                        to_dict(self.cfg))
        try:
            return self._train_loop()
        finally:
            if self.loggers is not None:
                self.loggers.close()
                self.loggers = None

    def _train_loop(self) -> Path:
        t = self.cfg.train
        self.method.train()
        bar = tqdm(total=self.stop_step, initial=self.step, disable=not (self.progress and dist.is_main()),
                   desc=f"pretrain {self.cfg.method.get('name')} on {self.device}", unit="step",
                   dynamic_ncols=True)
        speed = _Throughput()
        while self.step < self.stop_step:
            epoch = self.step // self.steps_per_epoch
            if hasattr(self.dataset, "set_epoch"):
                self.dataset.set_epoch(epoch)
            batches = global_batches(self.method, self.dataset, epoch, t.batch_size, t.seed)
            start_in_epoch = self.step - epoch * self.steps_per_epoch
            loader = DataLoader(self.dataset, batch_sampler=EpochBatches(batches, start_in_epoch),
                                collate_fn=self.method.collate, num_workers=t.num_workers,
                                pin_memory=devices.pin_memory(self.device),
                                # a private generator keeps worker seeding off the global RNG
                                generator=torch.Generator().manual_seed(t.seed + epoch))
            speed.waiting()
            for batch in loader:
                speed.got_batch()
                batch = devices.to_device(batch, self.device)
                info = StepInfo(step=self.step, epoch=epoch, steps_per_epoch=self.steps_per_epoch,
                                total_steps=self.total_steps, lr=float(self.lr_schedule[self.step]),
                                weight_decay=float(self.wd_schedule[self.step]),
                                momentum=float(self.momentum_schedule[self.step]))
                losses = self._optimise(batch, info, epoch)
                self.step += 1
                speed.step_done(t.batch_size)
                row = {"step": self.step, "epoch": epoch, "lr": info.lr, "wd": info.weight_decay,
                       "momentum": info.momentum, **self.method.logged_schedules(info)}
                for k, v in losses.items():
                    row[k] = float(dist.all_reduce_mean(v.detach().float().clone()).item())
                if self.step % t.log_every == 0 or self.step == self.stop_step:
                    row.update(speed.report())
                    self._log(row)
                    bar.set_postfix(loss=f"{row['loss']:.4f}", lr=f"{info.lr:.2e}",
                                    ips=f"{row['img_per_s']:.0f}", data=f"{row['data_wait_share']:.0%}")
                bar.update(1)
                if self.step % t.checkpoint_every == 0 or self.step == self.stop_step:
                    self.save_resume()
                _fault_injection(self.step)
                if self.step >= self.stop_step:
                    break
                speed.waiting()
        bar.close()
        dist.barrier()
        return self.export() if dist.is_main() else self.out_dir / "backbone.safetensors"

    def _optimise(self, batch, info: StepInfo, epoch: int) -> dict[str, torch.Tensor]:
        """One optimisation step (the official DINO/iBOT order: scaled backward, unscale,
        per-parameter clip, cancel the last layer's gradients, scaler step, EMA)."""
        t = self.cfg.train
        self._set_hparams(self.step)
        with devices.autocast(self.device, t.precision):
            losses = self.model(batch, info)
        loss = losses["loss"]
        if not math.isfinite(loss.item()):
            raise FloatingPointError(f"loss is {loss.item()} at step {self.step}; stopping "
                                     "(lower the learning rate or check the data)")
        self.optimizer.zero_grad(set_to_none=True)
        self.scaler.scale(loss).backward()  # under DDP the gradients are averaged here
        self.scaler.unscale_(self.optimizer)
        if t.clip_grad:
            clip_per_parameter(self.params, t.clip_grad)
        if epoch < t.freeze_last_layer:
            for p in self.last_layer:
                p.grad = None
        self.scaler.step(self.optimizer)
        self.scaler.update()
        self.method.on_step_end(info)
        return losses


class _Throughput:
    """Images per second, seconds per step and the share of wall time spent waiting for the
    data loader, over each logging interval: a GPU starved by its input pipeline shows a high share."""

    def __init__(self):
        self.t_interval = self.t_wait = time.perf_counter()
        self.t_start = self.t_interval
        self.images = self.steps = 0
        self.wait_s = 0.0

    def waiting(self) -> None:
        self.t_wait = time.perf_counter()

    def got_batch(self) -> None:
        self.wait_s += time.perf_counter() - self.t_wait

    def step_done(self, images: int) -> None:
        self.images += images
        self.steps += 1

    def report(self) -> dict[str, float]:
        now = time.perf_counter()
        span = max(now - self.t_interval, 1e-9)
        out = {"img_per_s": self.images / span, "step_s": span / max(1, self.steps),
               "data_wait_share": min(1.0, self.wait_s / span), "elapsed_s": now - self.t_start}
        self.t_interval, self.images, self.steps, self.wait_s = now, 0, 0, 0.0
        return out


def _fault_injection(step: int) -> None:
    """Tests kill the process hard after a given step to prove exact resume."""
    kill_after = os.environ.get("SSL_BENCH_FAULT_KILL_AFTER_STEP")
    if kill_after and step == int(kill_after):
        import signal

        os.kill(os.getpid(), signal.SIGKILL)


def pretrain(cfg: PretrainConfig, out_dir: Path, source: str = "<config>", progress: bool = True) -> Path:
    """Train (resuming from ``out_dir/resume.pt`` when present) and export the teacher backbone."""
    dist.init_from_env(devices.resolve_device(cfg.train.device))
    return Trainer(cfg, out_dir, source, progress).train()


def load_pretrain_config(raw: dict, source: str) -> PretrainConfig:
    raw = {k: v for k, v in raw.items() if k not in ("_source_",)}
    return from_dict(PretrainConfig, raw, source)
