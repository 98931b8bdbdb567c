"""One fine-tuning training step of ViT-S/16 at 224 px with the full augmentation, the project's
against iBOT's official ``engine_for_finetuning.train_one_epoch``, side by side in one run.

    python -m benchmarks.finetune.bench_step /path/to/ibot [--batch 8] [--threads 1] [--rounds 3]

Both sides: the README's ViT-S/16 recipe (RandAugment ``rand-m9-mstd0.5-inc1``, random erasing
0.25, mixup 0.8 / cutmix 1.0 with label smoothing 0.1, drop path 0.1, layer decay 0.75, AdamW,
class-token head, ImageNet mean / std), the same JPEG files, the same batch, the same torch
threads, one process, loader workers 0 (so the wait for data is the decoding and augmentation
of the batch, measured on the step's clock), float32 on the CPU (the official autocast and
GradScaler disable themselves without CUDA). The project's side is its run's loop body: its
dataset (``TransformedImages`` with its seeded train transform), its classifier, optimizer,
Mixup, criterion and ``micro_step``. The official side is ``build_transform`` / torchvision's
``ImageFolder`` / ``create_model`` / ``create_optimizer`` / ``cosine_scheduler`` /
``train_one_epoch`` of the checkout (the CPU stand-ins are in reference/official_ibot.py; the
one that matters here: Pillow >= 11 refuses RandAugment's posterize to 0 bits, which ``inc1``
reaches at magnitude 10; the official transform then gives a black image, as the Pillow of the
official code did, and as the project's transform does).

Rounds alternate which side goes first; each round runs ``--steps`` optimisation steps per side
after one warm-up step per side. Printed: seconds per step (median over rounds), the share of
the step spent waiting for data, and project / official.
"""
from __future__ import annotations

import argparse
import contextlib
import io
import json
import platform
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from benchmarks.finetune.reference import official_ibot
from benchmarks.finetune.reference.fixture_files import project_name



README_VIT_S = ["--model", "vit_small", "--epochs", "200", "--warmup_epochs", "20", "--drop_path", "0.1",
                "--layer_decay", "0.75", "--mixup", "0.8", "--cutmix", "1.0", "--layer_scale_init_value", "0.0",
                "--disable_rel_pos_bias", "--abs_pos_emb", "--use_cls", "--imagenet_default_mean_and_std"]
NUM_CLASSES = 1000


class Clock:
    """Wall seconds and this process's CPU seconds: on a shared machine the wall clock also
    counts the time other jobs held the core; the CPU time does not."""

    def __init__(self):
        self.wall, self.cpu = time.perf_counter(), time.process_time()

    def elapsed(self) -> tuple[float, float]:
        return time.perf_counter() - self.wall, time.process_time() - self.cpu


class TimedLoader:
    """An iterable over a DataLoader that adds the (wall, CPU) time spent in ``next()`` to ``wait``."""

    def __init__(self, loader):
        self.loader, self.wait = loader, (0.0, 0.0)

    def __len__(self):
        return len(self.loader)

    def __iter__(self):
        it = iter(self.loader)
        while True:
            clock = Clock()
            try:
                item = next(it)
            except StopIteration:
                return
            wall, cpu = clock.elapsed()
            self.wait = (self.wait[0] + wall, self.wait[1] + cpu)
            yield item


def write_images(root: Path, n: int, seed: int = 0) -> tuple[list[Path], list[int]]:
    """``n`` JPEGs of 320 x 256 (smooth colour fields with noise, a photo's decoding cost) in an
    ImageFolder layout of 4 classes."""
    from PIL import Image

    rng = np.random.default_rng(seed)
    paths, labels = [], []
    yy, xx = np.mgrid[0:256, 0:320]
    for i in range(n):
        label = i % 4
        base = np.stack([np.sin(xx / rng.uniform(10, 60) + c) * np.cos(yy / rng.uniform(10, 60)) for c in range(3)], -1)
        img = ((base * 0.4 + 0.5 + rng.normal(0, 0.05, base.shape)).clip(0, 1) * 255).astype(np.uint8)
        path = root / f"class{label}" / f"{i:04d}.jpg"
        path.parent.mkdir(parents=True, exist_ok=True)
        Image.fromarray(img).save(path, quality=90)
        paths.append(path)
        labels.append(label)
    return paths, labels


class Official:
    def __init__(self, checkout: Path, image_root: Path, batch: int, steps: int):
        runner = official_ibot.load_runner(checkout)
        self.off = official_ibot.load(checkout)
        args = official_ibot.official_args(checkout, README_VIT_S + ["--batch_size", str(batch)])
        args.nb_classes = NUM_CLASSES
        with contextlib.redirect_stdout(io.StringIO()):
            transform = runner.build_transform(True, args)
        official_ibot.posterize_zero_bits_black(transform)
        dataset = runner.ImageFolder(str(image_root), transform=transform)
        sampler = torch.utils.data.RandomSampler(dataset, generator=torch.Generator().manual_seed(0))
        self.loader = torch.utils.data.DataLoader(dataset, sampler=sampler, batch_size=batch, num_workers=0,
                                                  drop_last=True)
        self.model = self.off.modeling.vit_small(
            img_size=args.input_size, num_classes=NUM_CLASSES, drop_rate=args.drop, drop_path_rate=args.drop_path,
            attn_drop_rate=args.attn_drop_rate, use_mean_pooling=args.use_mean_pooling, init_scale=args.init_scale,
            use_rel_pos_bias=args.rel_pos_bias, use_abs_pos_emb=args.abs_pos_emb,
            use_learned_abs_pos_emb=args.learned_abs_pos_emb, init_values=args.layer_scale_init_value)
        depth = self.model.get_num_layers()
        assigner = self.off.optim_factory.LayerDecayValueAssigner(
            [args.layer_decay ** (depth + 1 - i) for i in range(depth + 2)])
        with contextlib.redirect_stdout(io.StringIO()):
            self.optimizer = self.off.optim_factory.create_optimizer(
                args, self.model, skip_list=self.model.no_weight_decay(), get_num_layer=assigner.get_layer_id,
                get_layer_scale=assigner.get_scale)
            self.lr = self.off.utils.cosine_scheduler(args.lr, args.min_lr, args.epochs, steps,
                                                      warmup_epochs=args.warmup_epochs, warmup_steps=args.warmup_steps)
            self.wd = self.off.utils.cosine_scheduler(args.weight_decay, args.weight_decay, args.epochs, steps)
        from timm.data import Mixup
        from timm.loss import SoftTargetCrossEntropy

        self.mixup = Mixup(mixup_alpha=args.mixup, cutmix_alpha=args.cutmix, cutmix_minmax=args.cutmix_minmax,
                           prob=args.mixup_prob, switch_prob=args.mixup_switch_prob, mode=args.mixup_mode,
                           label_smoothing=args.smoothing, num_classes=NUM_CLASSES)
        self.criterion = SoftTargetCrossEntropy()
        self.scaler = self.off.utils.NativeScalerWithGradNormCount()
        self.steps = steps

    def run(self, steps: int):
        """((wall, CPU) seconds, (wall, CPU) seconds waiting for data) of ``steps`` official steps:
        one train_one_epoch over a loader cut to ``steps`` batches."""
        timed = TimedLoader(_Cut(self.loader, steps))
        clock = Clock()
        with contextlib.redirect_stdout(io.StringIO()):
            self.off.engine.train_one_epoch(self.model, self.criterion, timed, self.optimizer, torch.device("cpu"), 0,
                                            self.scaler, max_norm=None, model_ema=None, mixup_fn=self.mixup,
                                            start_steps=0, lr_schedule_values=self.lr, wd_schedule_values=self.wd,
                                            num_training_steps_per_epoch=steps, update_freq=1)
        return clock.elapsed(), timed.wait


class _Cut:
    """The first ``n`` batches of a DataLoader, with a length (MetricLogger asks for it)."""

    def __init__(self, loader, n):
        self.loader, self.n = loader, n

    def __len__(self):
        return self.n

    def __iter__(self):
        for i, batch in enumerate(self.loader):
            if i == self.n:
                return
            yield batch


class Project:
    def __init__(self, paths, labels, batch: int, steps: int, official_state: dict):
        from benchmarks.finetune import data as ftdata
        from benchmarks.finetune.config import FinetuneConfig
        from benchmarks.finetune.model import FinetuneClassifier
        from benchmarks.finetune.train import build_criterion, build_mixup, build_optimizer, official_cosine
        from harness.models.backbone import create_backbone

        cfg = FinetuneConfig(epochs=200, batch_size=batch, warmup_epochs=20, drop_path=0.1, layer_decay=0.75,
                             mixup=0.8, cutmix=1.0, use_mean_pooling=False, imagenet_default_mean_and_std=True)
        self.cfg, self.ftdata = cfg, ftdata
        self.dataset = ftdata.TransformedImages(ftdata.ImageFiles(paths), labels, ftdata.train_transform(cfg), seed=0)
        self.model = FinetuneClassifier(create_backbone("vit_small_patch16_224"), NUM_CLASSES,
                                        use_mean_pooling=False, init_scale=cfg.init_scale, drop_path=cfg.drop_path,
                                        seed=0)
        self.model.load_state_dict({project_name(k): v for k, v in official_state.items()})
        self.optimizer = build_optimizer(self.model, cfg)
        self.criterion, self.mixup = build_criterion(cfg), build_mixup(cfg, NUM_CLASSES)
        self.lr = official_cosine(cfg.peak_lr(), cfg.min_lr, cfg.epochs, steps, cfg.warmup_epochs, cfg.warmup_steps)
        self.wd = official_cosine(cfg.weight_decay, cfg.weight_decay, cfg.epochs, steps)
        self.epoch = 0

    def run(self, steps: int):
        from benchmarks.finetune.step import micro_step

        batches = self.ftdata.epoch_micro_batches(len(self.dataset), self.cfg.batch_size, 1, 0, self.epoch)[:steps]
        self.epoch += 1
        self.dataset.set_epoch(self.epoch)
        loader = torch.utils.data.DataLoader(self.dataset, batch_sampler=batches, num_workers=0)
        timed = TimedLoader(loader)
        self.model.train()
        clock = Clock()
        for i, (images, targets) in enumerate(timed):
            micro_step(self.model, self.criterion, self.optimizer, images, targets, lr=float(self.lr[i]),
                       weight_decay=float(self.wd[i]), mixup=self.mixup)
        return clock.elapsed(), timed.wait


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    parser.add_argument("official", type=Path,
                        help=f"a checkout of {official_ibot.REPOSITORY} (outside this repository)")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--steps", type=int, default=2, help="optimisation steps per side per round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", type=Path, default=None, help="also write the numbers here")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    np.random.seed(0)
    with tempfile.TemporaryDirectory(prefix="ssl-bench-ft-bench-") as tmp:
        n_images = args.batch * (args.steps + 1) * 2
        paths, labels = write_images(Path(tmp), n_images)
        official = Official(args.official.resolve(), Path(tmp), args.batch, args.steps + 1)
        project = Project(paths, labels, args.batch, args.steps + 1, official.model.state_dict())
        sides = {"official": official, "project": project}
        for side in sides.values():  # warm-up step
            side.run(1)
        rounds = {k: {"wall": [], "cpu": [], "wait_wall": [], "wait_cpu": []} for k in sides}
        for r in range(args.rounds):
            for name in (("official", "project") if r % 2 == 0 else ("project", "official")):
                (wall, cpu), (wait_wall, wait_cpu) = sides[name].run(args.steps)
                got = rounds[name]
                got["wall"].append(wall / args.steps)
                got["cpu"].append(cpu / args.steps)
                got["wait_wall"].append(wait_wall / wall)
                got["wait_cpu"].append(wait_cpu / cpu)
    result = {"batch": args.batch, "threads": args.threads, "steps_per_round": args.steps, "rounds": args.rounds,
              "torch": torch.__version__, "machine": platform.processor() or platform.machine(),
              "per_round": rounds}
    for k, got in rounds.items():
        for what, values in got.items():
            result[f"{k}_{what}"] = statistics.median(values)
    result["project_over_official_wall"] = result["project_wall"] / result["official_wall"]
    result["project_over_official_cpu"] = result["project_cpu"] / result["official_cpu"]
    print(f"ViT-S/16 at 224, batch {args.batch}, {args.threads} thread(s), {args.rounds} rounds x {args.steps} steps "
          f"(medians over rounds)")
    for k, got in rounds.items():
        print(f"{k:>9}: {result[f'{k}_wall']:.3f} s/step wall, {result[f'{k}_cpu']:.3f} s/step CPU; "
              f"waiting for data {100 * result[f'{k}_wait_wall']:.1f} % (wall), "
              f"{100 * result[f'{k}_wait_cpu']:.1f} % (CPU)"
              f"; rounds (wall) {', '.join(f'{t:.3f}' for t in got['wall'])}")
    print(f"project / official: {result['project_over_official_wall']:.3f} (wall), "
          f"{result['project_over_official_cpu']:.3f} (CPU)")
    if args.json:
        args.json.write_text(json.dumps(result, indent=1) + "\n")
    return result


if __name__ == "__main__":
    main()
