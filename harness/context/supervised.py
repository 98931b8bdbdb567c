"""The supervised reference: the methods' backbone trained with labels, on their step budget.

Cross-entropy through a linear layer on [CLS] over a classification train split (the
object-centric SynthScenes split in the default suite), AdamW at a constant learning rate.
Colours are randomised per image (a channel permutation, grey with probability 0.5) and images
flipped horizontally, so that colour is as useless to it as to the pretraining methods and the
row shows what labels teach about shape and texture in the same number of steps.

It is a context row, not a method: the pretraining engine feeds unlabelled multi-crop batches
and the method contract has no labels, so a small trainer here keeps both as they are. The
result is a harness checkpoint cached under a key of everything that changes the weights
(the spec, the data's identity, the kind of device), like pretraining checkpoints, and loaded
back through the verified-checkpoint path so records key it by its sha256.

The train split is held in memory (uint8 at the architecture's image size): a reference
learner for small data sets such as SynthScenes, not an ImageNet trainer.
"""
from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image
from torch import nn
from tqdm.auto import tqdm

from harness.models.backbone import create_backbone
from harness.config import fingerprint
from harness.data.io import data_identity
from harness.data.transforms import IMAGENET_MEAN, IMAGENET_STD
from harness.runtime.device import device_type, resolve_device
from harness.errors import DataError

TRAINER_VERSION = 1  # part of the cache key: a change to the trainer must not reuse checkpoints


@dataclass
class SupervisedSpec:
    """A suite's ``supervised:`` block; every field changes the weights."""

    arch: str = "vit_cpu_tiny"
    steps: int = 400
    batch_size: int = 64
    lr: float = 1.0e-3
    weight_decay: float = 0.05
    seed: int = 0
    dataset: str = "imagefolder"  # a registered classification reader
    data_root: str = "{synth}/imagenet"
    split: str = "train"


def load_labelled(dataset: str, root: Path, split: str, size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(N, H, W, 3) uint8 images at ``size`` and (N,) labels of one classification split."""
    from harness.registry import DATASETS

    reader = DATASETS.get(dataset)(root, split)
    if len(reader) == 0:
        raise DataError(f"supervised reference: {dataset} at {root} has no {split!r} images")
    images = np.empty((len(reader), size, size, 3), np.uint8)
    for i in range(len(reader)):
        img = reader.load_image(i).convert("RGB")
        if img.size != (size, size):
            img = img.resize((size, size), Image.BICUBIC)
        images[i] = np.asarray(img)
    return torch.from_numpy(images), torch.as_tensor(np.asarray(reader.targets), dtype=torch.long)


def _augment(batch: torch.Tensor, g: torch.Generator) -> torch.Tensor:
    """uint8 (B, H, W, 3) -> normalised float (B, 3, H, W), colour randomised, flipped."""
    x = batch.permute(0, 3, 1, 2).float() / 255.0
    perm = torch.stack([torch.randperm(3, generator=g) for _ in range(len(x))])
    x = torch.gather(x, 1, perm[:, :, None, None].expand_as(x))
    grey = torch.rand(len(x), generator=g) < 0.5
    x[grey] = x[grey].mean(1, keepdim=True).expand(-1, 3, -1, -1)
    flip = torch.rand(len(x), generator=g) < 0.5
    x[flip] = x[flip].flip(-1)
    mean = torch.tensor(IMAGENET_MEAN).view(1, 3, 1, 1)
    std = torch.tensor(IMAGENET_STD).view(1, 3, 1, 1)
    return (x - mean) / std


def train_supervised(spec: SupervisedSpec, root: Path, *, device: str = "cpu", progress: bool = True,
                     log_rows: list[dict] | None = None, log_every: int = 10):
    """The trained backbone (eval mode, on the CPU). Deterministic for a spec on one device.
    ``log_rows`` (when given) receives {step, loss, lr} every ``log_every`` steps and at the end."""
    dev = resolve_device(device)
    with torch.random.fork_rng(devices=[dev] if dev.type == "cuda" else []):
        torch.manual_seed(spec.seed)
        backbone = create_backbone(spec.arch)
        size = backbone.patch_embed.img_size[0]
        images, labels = load_labelled(spec.dataset, root, spec.split, size)
        head = nn.Linear(backbone.embed_dim, int(labels.max()) + 1)
    backbone.to(dev).train()
    head.to(dev)
    opt = torch.optim.AdamW([*backbone.parameters(), *head.parameters()], lr=spec.lr,
                            weight_decay=spec.weight_decay)
    g = torch.Generator().manual_seed(spec.seed)
    for step in tqdm(range(1, spec.steps + 1), desc="supervised reference", unit="step", disable=not progress,
                     leave=False):
        idx = torch.randint(0, len(images), (spec.batch_size,), generator=g)
        x = _augment(images[idx], g).to(dev)
        loss = F.cross_entropy(head(backbone.forward_features(x)[:, 0]), labels[idx].to(dev))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if log_rows is not None and (step % log_every == 0 or step == spec.steps):
            log_rows.append({"step": step, "loss": float(loss.detach()), "lr": spec.lr})
    return backbone.cpu().eval()


def checkpoint_dir(spec: SupervisedSpec, root: Path, device: str = "cpu") -> Path:
    """Where the weights of this spec on this data and kind of device are cached."""
    from harness.paths import checkpoint_cache_dir

    # which data (resolved root and content stamp), not how the suite spelled its root
    key = {"v": TRAINER_VERSION, **asdict(spec), "data_root": None, "data": data_identity(root),
           "device": device_type(device)}  # from the spec: a login node may have no GPU
    return checkpoint_cache_dir() / f"supervised-{fingerprint(key)}"


def supervised_checkpoint(spec: SupervisedSpec, root: Path, *, device: str = "cpu", progress: bool = True,
                          log=print) -> Path:
    """Train (or reuse the cached result of) the supervised reference; the checkpoint's path."""
    out = checkpoint_dir(spec, root, device) / "backbone.safetensors"
    if out.is_file() and out.with_suffix(".json").is_file():
        log(f"[supervised] using cached checkpoint {out}")
        return out
    log(f"[supervised] training {spec.arch} for {spec.steps} steps of {spec.batch_size} on {root} -> {out.parent}")
    return write_supervised(spec, root, out.parent, device=device, progress=progress, log=log)


def write_supervised(spec: SupervisedSpec, root: Path, out_dir: Path, *, device: str = "cpu",
                     progress: bool = True, log=print) -> Path:
    """Train the supervised reference into ``out_dir``: backbone.safetensors (+ .json) and
    log.jsonl (loss and lr per logged step). Returns the checkpoint's path."""
    from harness.models.checkpoints import save_checkpoint
    from harness.io_utils import atomic_write

    t0 = time.perf_counter()
    rows: list[dict] = []
    backbone = train_supervised(spec, root, device=device, progress=progress, log_rows=rows)
    seconds = time.perf_counter() - t0
    log(f"[supervised] trained in {seconds:.0f} s")
    out_dir.mkdir(parents=True, exist_ok=True)
    atomic_write(out_dir / "log.jsonl", lambda p: p.write_text("".join(json.dumps(r) + "\n" for r in rows)))
    return save_checkpoint(out_dir / "backbone", backbone.backbone_state_dict(), {
        "method": "supervised", "context": "supervised", "init_seed": spec.seed, "arch": spec.arch,
        "arch_kwargs": backbone.arch_kwargs,
        "pretrain_data": f"{spec.dataset}:{root}:{spec.split}", "epochs": None, "steps": spec.steps,
        "config": asdict(spec), "train_seconds": round(seconds, 1)})


def add_cli(subparsers) -> None:
    """Adds `supervised`: train the supervised reference into a folder (as `pretrain` does a method)."""
    s = subparsers.add_parser("supervised", help="train the supervised reference into OUT")
    s.add_argument("--data-root", required=True,
                   help="the root the spec's data_root names (SynthScenes: the generated folder)")
    s.add_argument("--out", required=True)
    s.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="a SupervisedSpec field (arch, steps, batch_size, lr, weight_decay, seed, dataset, "
                        "data_root, split)")
    s.add_argument("--device", default="cpu")
    s.add_argument("--no-progress", action="store_true")
    s.set_defaults(func=cmd_supervised)


def cmd_supervised(args) -> int:
    from harness.config import apply_overrides, from_dict

    spec = from_dict(SupervisedSpec, apply_overrides({}, args.set), "--set")
    root = Path(spec.data_root.replace("{synth}", args.data_root))
    path = write_supervised(spec, root, Path(args.out), device=args.device, progress=not args.no_progress)
    print(f"checkpoint: {path}")
    return 0

